# What the real PyPI readers see in a file, as canonical JSON on stdout: run by .deps/venv's python (tests/requirements.txt), by tests/golden/make_golden.py to make a golden and by tests/integration/test_golden.py to compare with it.
"""
    pypi_read.py safetensors PATH   # Hugging Face's safetensors, framework "numpy"
    pypi_read.py gguf PATH          # gguf-py's GGUFReader

safetensors: safe_open(PATH, framework="numpy"), its metadata() (sorted
by key: the reader's dict comes in an order of its own) and, for
every name of keys() in that order, get_slice's dtype, then get_tensor's
numpy dtype, shape and the sha256 of its bytes (C order, as numpy holds
them: little-endian on this host).

gguf: the file's byte order as GGUFReader found it and every tensor in
the file's order: name, type name, shape in GGUF order (ne), the absolute
offset of its data and its size in bytes.

The JSON keeps the readers' order, one tensor a line, and ends in a
newline, so that the same reading gives the same bytes.
"""
import hashlib
import json
import sys


def read_safetensors(path):
    from safetensors import safe_open
    out = {}
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()      # a dict whose order varies from run to run
        out["metadata"] = None if meta is None else dict(sorted(meta.items()))
        tensors = []
        for name in f.keys():
            dtype = f.get_slice(name).get_dtype()
            a = f.get_tensor(name)
            tensors.append({"name": name, "dtype": dtype, "numpy": str(a.dtype),
                            "shape": list(a.shape),
                            "sha256": hashlib.sha256(a.tobytes(order="C")).hexdigest()})
        out["tensors"] = tensors
    return out


def read_gguf(path):
    import gguf
    r = gguf.GGUFReader(path, "r")
    out = {"endian": r.endianess.name, "tensors": []}
    for t in r.tensors:
        out["tensors"].append({"name": t.name, "type": t.tensor_type.name,
                               "ne": [int(x) for x in t.shape],
                               "offset": int(t.data_offset), "nbytes": int(t.n_bytes)})
    return out


def dumps(obj):
    """obj as JSON: its keys one a line, a list's items one a line."""
    lines = []
    for k, v in obj.items():
        if isinstance(v, list):
            items = [" " * 2 + json.dumps(x, ensure_ascii=False) for x in v]
            text = "[\n" + ",\n".join(items) + "\n ]" if items else "[]"
        else:
            text = json.dumps(v, ensure_ascii=False)
        lines.append(" %s: %s" % (json.dumps(k), text))
    return "{\n" + ",\n".join(lines) + "\n}\n"


def main(argv):
    if len(argv) != 3 or argv[1] not in ("safetensors", "gguf"):
        sys.stderr.write(__doc__)
        return 2
    got = (read_safetensors if argv[1] == "safetensors" else read_gguf)(argv[2])
    sys.stdout.buffer.write(dumps(got).encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
