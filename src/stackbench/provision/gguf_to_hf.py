"""Standalone script (run by the vLLM environment's Python): a Hugging Face copy of a GGUF model.

transformers dequantizes the GGUF on load; the GGUF-quantized model object refuses to save, so its
weights are copied into a fresh model built from the same config, then model and tokenizer are saved.

    python gguf_to_hf.py <dir containing the gguf> <gguf file name> <output dir>
"""

import sys


def main(gguf_dir: str, gguf_file: str, out_dir: str) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_file)
    loaded = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_file, torch_dtype=torch.float32)
    config = AutoConfig.from_pretrained(gguf_dir, gguf_file=gguf_file)
    fresh = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict())
    fresh.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    print(f"saved {type(fresh).__name__} and tokenizer to {out_dir}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
