"""The models themselves, below the stages that read them: geometry from GGUF metadata, config.json or
configs/models (geometry.py)."""
