"""The tests' layout keeps itself true. tests/unit mirrors src/stackbench: a module's tests are
tests/unit/<package>/test_<module>.py where that file exists, and MAP names every module's test files
(that one first), so a module without tests, a test file that covers no module, and an entry naming a file
that is gone all fail here. Test files are imported by their base name (pytest's rootdir import), so two
packages' modules of one name (measure/acceptance.py, analysis/acceptance.py) cannot both have their mirror:
MAP says where the second one's tests are. Integration-marked tests live under tests/integration."""

import ast
import sys
from pathlib import Path
from types import ModuleType

from paths import ROOT, TESTS

PACKAGE = ROOT / "src/stackbench"

# Every report section is exercised by rendering the report: the section test, both golden reports, the rehearsal's.
SECTION_TESTS = ("unit/report/test_sections.py", "unit/report/test_golden_report.py", "unit/rehearsal/test_rehearsal_report.py")
# Every registered engine is exercised by the seam's test (each member's signature, no restated default), its own mirror
# first where it has one.
ENGINE_TESTS = ("unit/engines/test_adapter_interface.py",)
# Test files beyond those a derived row names (DERIVED: engines from the registry, sections from SECTIONS).
BEYOND_DERIVED = {"engines/llamacpp.py": ("unit/engines/test_prompt_scores.py",), "engines/sglang.py": ("unit/engines/test_prompt_scores.py",),
                  "engines/vllm.py": ("unit/engines/test_prompt_scores.py",), "report/sections/texts.py": ("unit/report/test_text_spread.py",)}


def module_path(module: ModuleType) -> str:
    return str(Path(module.__file__).relative_to(PACKAGE))


def derived_rows() -> dict[str, tuple[str, ...]]:
    """The rows of the lists the package keeps itself: each registered engine's module (engines.ADAPTERS) and each
    report section's (report/sections SECTIONS, and the list's own module)."""
    from stackbench.engines import ADAPTERS
    from stackbench.report import sections

    rows = {}
    for adapter in ADAPTERS.values():
        module = module_path(sys.modules[type(adapter).__module__])
        own = mirror(module)
        rows[module] = ((own,) if (TESTS / own).is_file() else ()) + ENGINE_TESTS
    section_modules = [m for m in vars(sections).values() if isinstance(m, ModuleType) and getattr(m, "SECTION", None) in sections.SECTIONS]
    rows |= {module_path(m): SECTION_TESTS for m in [sections, *section_modules]}
    return {module: tests + BEYOND_DERIVED.get(module, ()) for module, tests in rows.items()}


# Module (under src/stackbench) -> the test files (under tests/) that exercise it, its mirror first.
MAP: dict[str, tuple[str, ...]] = {
    "cli.py": ("unit/test_cli.py", "unit/serve/test_commands.py", "unit/plan/test_init_other_box.py", "unit/host/test_preflight.py",
               "unit/results/test_kept_parts.py"),
    "analysis/__init__.py": ("unit/analysis/test_analysis.py",),
    "analysis/acceptance.py": ("unit/analysis/test_request_acceptance.py",),
    "analysis/common.py": ("unit/analysis/test_analysis.py", "unit/analysis/test_hoststate.py", "unit/analysis/test_plausibility.py"),
    "analysis/comparison.py": ("unit/analysis/test_analysis.py", "integration/test_compare.py"),
    "analysis/correctness.py": ("unit/analysis/test_accuracy_verdict.py", "unit/measure/test_probes.py", "unit/analysis/test_quality.py"),
    "analysis/clientstate.py": ("unit/analysis/test_clientstate.py", "integration/test_client_saturation.py"),
    "analysis/decide.py": ("unit/analysis/test_decide.py", "unit/analysis/test_decide_rounds.py", "unit/analysis/test_decide_sequential.py",
                           "unit/analysis/test_accuracy_verdict.py"),
    "analysis/energy.py": ("unit/analysis/test_energy_choice.py",),
    "analysis/gpustate.py": ("unit/analysis/test_hoststate.py", "integration/test_gpu_state.py"),
    "analysis/held.py": ("unit/analysis/test_held.py",),
    "analysis/hoststate.py": ("unit/analysis/test_hoststate.py", "integration/test_host_state.py"),
    "analysis/kv_audit.py": ("unit/analysis/test_analysis.py",),
    "analysis/levels.py": ("unit/analysis/test_levels.py", "unit/report/test_text_spread.py"),
    "analysis/plausibility.py": ("unit/analysis/test_plausibility.py",),
    "analysis/power.py": ("unit/analysis/test_analysis.py", "unit/analysis/test_energy_choice.py"),
    "analysis/quality.py": ("unit/analysis/test_quality.py",),
    "analysis/roofline.py": ("unit/analysis/test_analysis.py",),
    "analysis/sequence.py": ("unit/analysis/test_sequence.py",),
    "analysis/speculative.py": ("unit/analysis/test_analysis.py",),
    "analysis/spread.py": ("unit/analysis/test_analysis.py",),
    "config/__init__.py": ("unit/plan/test_config.py", "unit/plan/test_launch_schema.py", "unit/plan/test_gpu_limits_and_accuracy_set.py"),
    "config/loader.py": ("unit/plan/test_config.py", "unit/plan/test_launch_schema.py"),
    "config/kinds/__init__.py": ("unit/plan/test_workload_kinds.py",),
    "config/kinds/accuracy.py": ("unit/plan/test_workload_kinds.py", "unit/measure/test_accuracy.py"),
    "config/kinds/base.py": ("unit/plan/test_workload_kinds.py",),
    "config/kinds/divergence.py": ("unit/plan/test_workload_kinds.py", "unit/plan/test_divergence_plan.py"),
    "config/kinds/ladder.py": ("unit/plan/test_workload_kinds.py", "unit/plan/test_seed_workloads.py"),
    "config/kinds/long_prefill.py": ("unit/plan/test_workload_kinds.py",),
    "config/kinds/multi_turn.py": ("unit/plan/test_workload_kinds.py", "integration/test_seed_002_methods.py"),
    "config/kinds/probe.py": ("unit/plan/test_workload_kinds.py", "unit/plan/test_probeset.py"),
    "config/kinds/single.py": ("unit/plan/test_workload_kinds.py",),
    "config/model.py": ("unit/plan/test_load.py", "unit/plan/test_launchspec.py", "unit/measure/test_workloads.py"),
    "config/speculative.py": ("unit/plan/test_speculative_methods.py",),
    "engines/__init__.py": ("unit/engines/test_adapter_interface.py", "unit/plan/test_engine_env.py"),
    "engines/base.py": ("unit/engines/test_adapter_interface.py", "unit/engines/test_llamacpp.py", "unit/engines/test_sglang.py",
                        "unit/engines/test_vllm.py"),
    "engines/prometheus.py": ("unit/engines/test_prometheus.py",),
    "host/affinity.py": ("unit/host/test_affinity.py",),
    "host/boards.py": ("unit/host/test_boards.py", "unit/plan/test_node_2x4090.py"),
    "host/facts.py": ("unit/results/test_bundle.py", "unit/rehearsal/test_rehearsal_report.py"),
    "host/gpustate.py": ("unit/host/test_gpustate.py",),
    "host/hostload.py": ("unit/host/test_hostload.py",),
    "host/locks.py": ("unit/host/test_locks.py",),
    "host/powercap.py": ("unit/host/test_telemetry.py",),
    "host/preflight.py": ("unit/host/test_preflight.py",),
    "host/telemetry.py": ("unit/host/test_telemetry.py", "unit/host/test_energy_counter_steps.py", "unit/host/test_gpu_check.py"),
    "measure/acceptance.py": ("unit/measure/test_acceptance.py", "unit/analysis/test_request_acceptance.py"),
    "measure/accuracy.py": ("unit/measure/test_accuracy.py",),
    "measure/calibrate.py": ("unit/measure/test_calibrate.py",),
    "measure/cellstore.py": ("unit/plan/test_launchspec.py",),
    "measure/clientload.py": ("unit/measure/test_clientload.py", "unit/measure/test_runner.py",
                              "integration/test_client_saturation.py"),
    "measure/client.py": ("unit/measure/test_client.py", "integration/test_client_pace.py", "integration/test_conformance.py"),
    "measure/correctness.py": ("unit/measure/test_correctness.py",),
    "measure/divergence.py": ("unit/measure/test_divergence_pass.py",),
    "measure/precision.py": ("unit/measure/test_precision.py", "integration/test_precision_served.py"),
    "measure/probes.py": ("unit/measure/test_probes.py", "integration/test_probes_served.py"),
    "measure/progress.py": ("unit/measure/test_progress.py", "integration/test_progress_console.py"),
    "measure/publish.py": ("unit/results/test_bundle.py",),
    "measure/rows.py": ("unit/measure/test_rows.py",),
    "measure/runner.py": ("unit/measure/test_runner.py", "unit/host/test_energy_counter_steps.py"),
    "measure/sequencer.py": ("unit/measure/test_sequencer.py", "unit/host/test_hostload.py", "unit/host/test_telemetry.py",
                             "integration/test_measure_synthetic.py"),
    "measure/summary.py": ("unit/measure/test_summary.py", "unit/measure/test_figure_properties.py"),
    "measure/toolcall.py": ("integration/test_seed_002_methods.py",),
    "measure/workloads.py": ("unit/measure/test_workloads.py", "unit/plan/test_load.py"),
    "models/datasets.py": ("unit/measure/test_accuracy.py", "unit/plan/test_divergence_plan.py"),
    "models/formats.py": ("unit/analysis/test_analysis.py",),
    "models/geometry.py": ("unit/models/test_geometry.py", "integration/test_geometry_real_gguf.py"),
    "models/promptsets.py": ("unit/models/test_promptsets.py", "unit/measure/test_workloads.py", "integration/test_promptsets_real.py"),
    "models/provenance.py": ("unit/results/test_bundle.py",),
    "models/recipes.py": ("unit/provision/test_envs.py",),
    "plan/expand.py": ("unit/plan/test_config.py", "unit/plan/test_stacks.py", "unit/plan/test_replicates.py",
                       "unit/plan/test_node_2x4090.py", "unit/plan/test_seed_workloads.py"),
    "plan/definitions.py": ("unit/plan/test_definitions.py",),
    "plan/launchspec.py": ("unit/plan/test_launchspec.py", "unit/plan/test_definitions.py", "unit/results/test_results_compat.py"),
    "plan/probeset.py": ("unit/plan/test_probeset.py",),
    "provision/envs.py": ("unit/provision/test_envs.py",),
    "provision/gguf_to_hf.py": ("integration/test_integration_vllm.py",),
    "provision/nodeinit.py": ("unit/plan/test_nodes.py", "unit/plan/test_init_other_box.py"),
    "provision/sglang_cpu_ops/sgl_kernel/__init__.py": ("unit/provision/test_sglang_cpu_ops.py",
                                                        "integration/test_sglang_cpu_ops_installed.py"),
    "rehearsal/budget.py": ("unit/rehearsal/test_budget.py",),
    "rehearsal/calibration.py": ("unit/rehearsal/test_calibration.py",),
    "rehearsal/launcher.py": ("unit/rehearsal/test_standin.py", "unit/rehearsal/test_budget.py"),
    "rehearsal/run.py": ("unit/rehearsal/test_run.py", "integration/test_rehearsal.py"),
    "rehearsal/simgpu.py": ("unit/rehearsal/test_simgpu_and_plan.py", "unit/host/test_gpustate.py"),
    "rehearsal/standin.py": ("unit/rehearsal/test_standin.py",),
    "report/budget.py": ("unit/rehearsal/test_budget.py", "unit/rehearsal/test_rehearsal_report.py"),
    "report/charts.py": ("unit/report/test_report.py", "unit/analysis/test_request_acceptance.py"),
    "report/decisions.py": ("unit/analysis/test_decide.py", "unit/report/test_report.py"),
    "report/layouts.py": ("unit/report/test_same_method.py", "unit/results/test_published.py"),
    "report/page.py": ("unit/report/test_report.py", "unit/report/test_golden_report.py"),
    "report/pairing.py": ("unit/report/test_golden_report.py", "unit/report/test_text_spread.py"),
    "report/provisional.py": ("integration/test_rerun.py",),
    "report/queries.py": ("unit/report/test_report.py", "unit/report/test_like_with_like.py"),
    "report/render.py": ("unit/report/test_report.py", "unit/report/test_golden_report.py", "unit/rehearsal/test_rehearsal_report.py"),
    "report/usecase.py": ("unit/report/test_usecase.py", "unit/report/test_usecase_rule.py"),
    "config/rehearsal.py": ("unit/rehearsal/test_simgpu_and_plan.py",),
    "measure/backend.py": ("unit/rehearsal/test_simgpu_and_plan.py", "integration/test_gpu_state.py"),
    "rehearsal/backend.py": ("unit/rehearsal/test_simgpu_and_plan.py",),
    "rehearsal/formats.py": ("unit/rehearsal/test_standin.py",),
    "report/derived.py": ("unit/report/test_report.py",),
    "report/full.py": ("unit/report/test_report.py", "unit/report/test_golden_report.py"),
    "report/headline.py": ("unit/report/test_report.py", "unit/report/test_like_with_like.py"),
    "report/section.py": ("unit/report/test_sections.py", "unit/report/test_golden_report.py"),
    "report/seeds.py": ("unit/report/test_same_method.py", "unit/results/test_published.py"),
    "report/table.py": ("unit/report/test_report.py", "unit/report/test_golden_report.py"),
    "results/agreement.py": ("unit/results/test_agreement.py",),
    "results/basis.py": ("unit/results/test_basis.py",),
    "results/bundle.py": ("unit/results/test_bundle.py",),
    "results/collect.py": ("unit/results/test_kept_parts.py", "unit/results/test_bundle.py"),
    "results/divergence.py": ("unit/results/test_divergence.py",),
    "results/estimators.py": ("unit/results/test_estimators.py",),
    "results/judged.py": ("unit/analysis/test_decide.py",),
    "results/kept.py": ("unit/results/test_kept_parts.py",),
    "results/metrics.py": ("unit/results/test_metrics.py",),
    "results/pairing.py": ("unit/results/test_pairing.py",),
    "results/published.py": ("unit/results/test_published.py", "unit/results/test_seed_text.py"),
    "results/store.py": ("unit/results/test_store.py", "unit/results/test_results_compat.py"),
    "serve/container.py": ("unit/serve/test_commands.py", "integration/test_container.py"),
    "serve/launchers.py": ("unit/serve/test_launchers.py",),
    "serve/process.py": ("unit/serve/test_process.py",),
}


def mirror(module: str) -> str:
    """unit/<package>/test_<module>.py; a package's __init__, unit/<package>/test_<package>.py."""
    path = Path(module)
    name = path.parent.name if path.name == "__init__.py" else path.stem
    return str(Path("unit", path.parent, f"test_{name}.py"))


MAP |= derived_rows()
# Unit test files of the repository as a whole or of tests/support, no module's: the engine-name rule, the
# docs' claims, the CI capabilities, the test-tools wait, this layout.
REPOSITORY = ("unit/test_architecture.py", "unit/test_docs.py", "unit/test_capabilities.py", "unit/test_test_tools.py",
              "unit/test_test_layout.py", "unit/test_architecture_doc.py", "unit/test_import_cycles.py")


def holds_code(path: Path) -> bool:
    """A module with something besides its docstring and `from __future__` (a package's __init__ that only
    documents it is no module to test)."""
    body = ast.parse(path.read_text()).body
    return any(not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
               and not (isinstance(node, ast.ImportFrom) and node.module == "__future__") for node in body)


def package_modules() -> set[str]:
    return {str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py") if holds_code(path)}


def unit_test_files() -> set[str]:
    return {str(path.relative_to(TESTS)) for path in (TESTS / "unit").rglob("test_*.py")}


def test_every_module_of_the_package_has_an_entry_and_every_entry_a_module():
    modules = package_modules()
    assert len(modules) > 90, "no modules found"
    assert sorted(modules - MAP.keys()) == [], "a module without an entry in MAP: name the test files that exercise it"
    assert sorted(MAP.keys() - modules) == [], "an entry in MAP for a module that is gone"


def test_every_entry_names_test_files_that_exist_its_mirror_first_where_it_exists():
    assert all(MAP.values()), "an entry in MAP names no test file"
    missing = [f"{module}: {test}" for module, tests in MAP.items() for test in tests if not (TESTS / test).is_file()]
    assert missing == []
    mirrored = {module: mirror(module) for module in MAP if (TESTS / mirror(module)).is_file()}
    assert len(mirrored) > 40, "no mirrored test files found"
    assert {module: MAP[module][0] for module in mirrored} == mirrored


def test_every_unit_test_file_exercises_a_module_or_the_repository():
    named = {test for tests in MAP.values() for test in tests} | set(REPOSITORY)
    assert sorted(unit_test_files() - named) == [], "a unit test file MAP does not name: add it to the modules it exercises"


def marks_integration(path: Path) -> bool:
    """Whether a test file marks a test `integration`: a decorator, or the module's pytestmark."""
    tree = ast.parse(path.read_text())
    decorators = [d for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  for d in node.decorator_list]
    pytestmark = [node.value for node in tree.body if isinstance(node, ast.Assign)
                  and any(isinstance(target, ast.Name) and target.id == "pytestmark" for target in node.targets)]
    return any("mark.integration" in ast.unparse(expr) for expr in decorators + pytestmark)


def test_integration_marked_tests_live_under_tests_integration():
    assert any(marks_integration(path) for path in (TESTS / "integration").glob("test_*.py")), "the check finds no mark"
    assert sorted(path for path in unit_test_files() if marks_integration(TESTS / path)) == []
