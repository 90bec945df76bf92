"""The byte widths of weight and KV-cache formats, by the names engines and quant labels use: the
analysis (roofline, KV audit) and the rehearsal's stand-ins size from the same tables."""

# Bytes per element of KV-cache dtypes as engines name them (llama.cpp block types: bytes per block / 32).
KV_DTYPE_BYTES = {"f32": 4, "float32": 4, "f16": 2, "fp16": 2, "float16": 2, "bf16": 2, "bfloat16": 2,
                  "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
                  "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32, "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32}
# Bits per weight by exact weight-format name (the quant label before any parenthesised remark), used only
# when no row reports weight bytes: GGUF types from llama.cpp's quantize table, group-128 INT4/AWQ with a
# 16-bit scale and zero per group, NVFP4 with an FP8 scale per 16 values.
BITS_PER_WEIGHT = {"q4_k_m": 4.85, "q4_1": 5.0, "q4_0": 4.5, "q5_k_m": 5.69, "q6_k": 6.56, "q8_0": 8.5,
                   "awq": 4.25, "awq w4a16": 4.25, "int4": 4.25, "w4a16": 4.25, "nvfp4": 4.5, "fp8": 8.0,
                   "bf16": 16.0, "fp16": 16.0, "f16": 16.0}
