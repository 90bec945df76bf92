"""ServerProcess owns its process group: readiness, exit during load, timeout, teardown of children
even when the leader died first. The child here is a small Python test server (a test double, named as
such), because these faults are about process handling, not about any engine."""

import sys
import textwrap

import pytest

from stackbench.serve.process import ReadyTimeout, ServerExited, ServerProcess, free_port, group_members

DOUBLE = textwrap.dedent("""
    import http.server, os, sys, time
    mode, port = sys.argv[1], int(sys.argv[2])
    if os.fork() == 0:            # a worker child, like an engine's scheduler process
        time.sleep(600); sys.exit(0)
    if mode == "exit":
        print("fatal: cannot load model", flush=True); sys.exit(3)
    if mode == "never":
        time.sleep(600)
    if mode == "leader-dies":
        time.sleep(0.5); os._exit(0)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b'{"status":"ok"}')
        def log_message(self, *a): pass
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
""")


def server(tmp_path, mode, **kw):
    port = free_port()
    script = tmp_path / "double.py"
    script.write_text(DOUBLE)
    return ServerProcess([sys.executable, str(script), mode, str(port)], tmp_path / "server.log",
                         f"http://127.0.0.1:{port}", "/health", grace_s=2, **kw)


def test_ready_then_stop_leaves_no_process(tmp_path):
    proc = server(tmp_path, "serve").start()
    assert proc.wait_ready(20) < 20
    pgid = proc.pgid
    assert len(group_members(pgid)) == 2
    proc.stop()
    assert group_members(pgid) == []


def test_exit_during_load_is_reported_with_code_and_last_log_line(tmp_path):
    with pytest.raises(ServerExited, match=r"code 3 .*last log line: fatal: cannot load model"):
        with server(tmp_path, "exit") as proc:
            proc.wait_ready(20)


def test_readiness_timeout_and_cleanup(tmp_path):
    proc = server(tmp_path, "never").start()
    with pytest.raises(ReadyTimeout, match="not ready after 1 s"):
        proc.wait_ready(1)
    pgid = proc.pgid
    proc.stop()
    assert group_members(pgid) == []


def test_children_are_killed_when_the_leader_died_first(tmp_path):
    proc = server(tmp_path, "leader-dies").start()
    pgid = proc.pgid
    assert proc.process.wait(timeout=20) == 0 and group_members(pgid)  # the leader is gone, its worker runs on
    proc.stop()
    assert group_members(pgid) == []


def test_a_shell_string_is_refused(tmp_path):
    with pytest.raises(ValueError, match="never started through a shell"):
        ServerProcess("llama-server --port 1", tmp_path / "log", "http://x", "/health")


def test_log_text_is_this_processs_output_only(tmp_path):
    """The log file is appended across launches; a rerun must not read the previous server's lines."""
    first = server(tmp_path, "exit").start()
    first.process.wait(timeout=20)
    first.stop()
    second = server(tmp_path, "serve").start()
    try:
        second.wait_ready(20)
        assert "cannot load model" in (tmp_path / "server.log").read_text()
        assert "cannot load model" not in second.log_text()
    finally:
        second.stop()
