"""The plan stage: configs expanded into nodes and launches (expand), the launch spec with its
fingerprints (launchspec), and the types both use (model)."""

from stackbench.plan.model import Launch, Load, Model, Node, Workload

__all__ = ["Launch", "Load", "Model", "Node", "Workload"]
