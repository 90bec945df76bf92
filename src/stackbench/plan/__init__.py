"""The plan stage: configs expanded into nodes and launches (expand), asking each engine's adapter about
its flags and slots, and the launch spec with its fingerprints (launchspec). The types both use are the
configs' own (config/model.py), below the engines."""
