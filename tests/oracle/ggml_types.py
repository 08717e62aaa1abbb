# The ggml tensor types a GGUF file may name: id -> (name, elements per block, bytes per block), for the pure-Python reader and writer.
"""
One table for tests/oracle/pyreader.py and tests/oracle/gguf_write.py (no
imports: gguf_write.py, and so scripts/make-demo, needs nothing but the
standard library).  Ids removed from ggml (4, 5, 31-33, 36-38) are absent.
Cross-checked against libggml-base.so by tests/oracle/ggml.py
(check_type_table).
"""

GGML_TYPES = {
    0: ("f32", 1, 4), 1: ("f16", 1, 2), 2: ("q4_0", 32, 18),
    3: ("q4_1", 32, 20), 6: ("q5_0", 32, 22), 7: ("q5_1", 32, 24),
    8: ("q8_0", 32, 34), 9: ("q8_1", 32, 36), 10: ("q2_K", 256, 84),
    11: ("q3_K", 256, 110), 12: ("q4_K", 256, 144), 13: ("q5_K", 256, 176),
    14: ("q6_K", 256, 210), 15: ("q8_K", 256, 292), 16: ("iq2_xxs", 256, 66),
    17: ("iq2_xs", 256, 74), 18: ("iq3_xxs", 256, 98), 19: ("iq1_s", 256, 50),
    20: ("iq4_nl", 32, 18), 21: ("iq3_s", 256, 110), 22: ("iq2_s", 256, 82),
    23: ("iq4_xs", 256, 136), 24: ("i8", 1, 1), 25: ("i16", 1, 2),
    26: ("i32", 1, 4), 27: ("i64", 1, 8), 28: ("f64", 1, 8),
    29: ("iq1_m", 256, 56), 30: ("bf16", 1, 2), 34: ("tq1_0", 256, 54),
    35: ("tq2_0", 256, 66), 39: ("mxfp4", 32, 17), 40: ("nvfp4", 64, 36),
    41: ("q1_0", 128, 18), 42: ("q2_0", 64, 18),
}
