#!/usr/bin/python3
# Edits metadata through a mount (echo, printf, python r+, truncate, sed -i, create, rm, mv, setfattr) and checks the file with ggml after each.
import errno
import os
import shutil
import subprocess
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import mount  # noqa: E402


def main():
    h = harness.start("edit")
    ggml = harness.require_oracle()
    import gguf_write as gw

    tmp = tempfile.mkdtemp(prefix="gguffs-edit-")
    model = os.path.join(tmp, "m.gguf")
    w = gw.GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add("general.name", "string", "before")
    w.add("general.alignment", "u32", 32)
    w.add("llama.context_length", "u32", 4096)
    w.add("llama.rope.freq_base", "f32", 10000.0)
    w.add("tokenizer.ggml.tokens", "array[string]", ["<s>", "a\nb", "c"])
    w.add("tokenizer.ggml.add_bos_token", "bool", True)
    w.add("tokenizer.chat_template", "string", "{{ x }}")
    w.add_tensor("blk.0.w", "f32", [64, 4], data=bytes(range(256)) * 4)
    w.add_tensor("out", "f16", [33], data=bytes(range(66)))
    w.write(model)

    m0 = ggml.read_gguf(model)
    hashes0 = harness.tensor_hashes(m0, model)

    def loaded(label):
        """ggml loads the file; tensors unchanged; returns {key: value}."""
        m = ggml.read_gguf(model)
        if not h.check(m is not None, "%s: ggml refuses the edited file: %s" % (label, ggml.last_log())):
            return {}
        h.check(harness.tensor_hashes(m, model) == hashes0, "%s: tensor bytes changed" % label)
        return {k.decode(): (t, harness.norm(v)) for k, t, v in m.kvs}, [k.decode() for k, _, _ in m.kvs]

    with h.case("the mount for the edits"), mount(model) as mnt:
        meta = os.path.join(mnt, "meta")
        with h.case("echo into u32"):
            r = harness.run("echo 8192 > llama.context_length", meta)
            h.check(r.returncode == 0, "echo 8192: %s" % r.stderr)
            h.check(open(os.path.join(meta, "llama.context_length")).read() == "8192\n", "read back")
            kv, order = loaded("echo")
            h.check(kv["llama.context_length"] == ("u32", 8192), "ggml sees %r" % (kv["llama.context_length"],))
            h.check(order == [k.decode() for k, _, _ in m0.kvs], "key order changed: %r" % order)
        with h.case("bad values change nothing"):
            before = open(model, "rb").read()
            for cmd in ("echo abc > llama.context_length", "echo -1 > llama.context_length",
                        "echo 4294967296 > llama.context_length", "echo maybe > tokenizer.ggml.add_bos_token",
                        "echo 64 > general.alignment"):
                r = harness.run(cmd, meta)
                h.check(r.returncode != 0 or "error" in r.stderr.lower() or "invalid" in r.stderr.lower(),
                        "%s: accepted (rc %d)" % (cmd, r.returncode))
            fd = os.open(os.path.join(meta, "general.name"), os.O_WRONLY | os.O_TRUNC)
            try:
                os.write(fd, b"\xff\xfe")
                h.fail("invalid UTF-8 accepted by write()")
            except OSError as e:
                h.check(e.errno == errno.EINVAL, "invalid UTF-8: errno %d" % e.errno)
            try:
                os.close(fd)
                h.fail("invalid UTF-8 accepted by close()")
            except OSError as e:
                h.check(e.errno == errno.EINVAL, "close after invalid UTF-8: errno %d" % e.errno)
            h.check(open(model, "rb").read() == before, "a refused edit changed the model file")
        with h.case("UTF-8 written in pieces: checked from where it was valid"):
            name = os.path.join(meta, "general.name")
            fd = os.open(name, os.O_WRONLY | os.O_TRUNC)
            try:
                for piece in (b"caf", b"\xc3", b"\xa9 ", b"\xe2\x82", b"\xac", b"x" * 20000):
                    os.write(fd, piece)       # a character cut between writes is fine
                os.lseek(fd, 1, os.SEEK_SET)
                os.write(fd, b"\xc3\xa0")     # written again over checked text
                os.lseek(fd, 0, os.SEEK_END)
                try:
                    os.write(fd, b"ok\xc3(")
                    h.fail("a cut character continued by ASCII accepted by write()")
                except OSError as e:
                    h.check(e.errno == errno.EINVAL, "bad continuation: errno %d" % e.errno)
            finally:
                try:
                    os.close(fd)
                except OSError:
                    pass
            fd = os.open(name, os.O_WRONLY | os.O_TRUNC)
            os.write(fd, b"caf\xc3")
            os.write(fd, b"\xa9 \xe2\x82")
            os.lseek(fd, 1, os.SEEK_SET)
            os.write(fd, b"\xc3\xa0")
            os.lseek(fd, 0, os.SEEK_END)
            os.write(fd, b"\xac!\n")
            os.close(fd)
            got = loaded("pieces")[0]["general.name"]
            h.check(got == ("string", "c\u00e0\u00e9 \u20ac!"), "pieces: %r" % (got,))
        with h.case("string, printf, python r+, truncate, sed -i"):
            harness.run("printf 'after' > general.name", meta)
            h.check(loaded("printf")[0]["general.name"] == ("string", "after"), "printf")
            with open(os.path.join(meta, "general.name"), "r+") as f:
                f.seek(0)
                f.write("AF")
            h.check(loaded("r+")[0]["general.name"] == ("string", "AFter"), "r+")
            os.truncate(os.path.join(meta, "general.name"), 2)
            h.check(loaded("truncate")[0]["general.name"] == ("string", "AF"), "truncate")
            r = harness.run("sed -i 's/x/message/' tokenizer.chat_template", meta)
            h.check(r.returncode == 0, "sed -i: %s" % r.stderr)
            h.check(loaded("sed")[0]["tokenizer.chat_template"] == ("string", "{{ message }}"), "sed -i")
            h.check(sorted(os.listdir(meta)) == sorted(k.decode() for k, _, _ in m0.kvs),
                    "sed left files behind: %r" % os.listdir(meta))
        with h.case("big string value (1 MB chat template)"):
            big = ("{% for m in messages %}{{ m.content }}{% endfor %}\n" * 20000)[:1 << 20]
            with open(os.path.join(meta, "tokenizer.chat_template"), "w") as f:
                f.write(big + "\n")
            h.check(loaded("big")[0]["tokenizer.chat_template"][1] == big, "1 MB template round trip")
            with open(os.path.join(meta, "tokenizer.chat_template"), "w") as f:
                f.write("small\n")
            h.check(loaded("shrink")[0]["tokenizer.chat_template"][1] == "small", "shrink")
        with h.case("arrays and floats"):
            harness.run("printf '<s>\\nx\\\\ny\\nz\\n' > tokenizer.ggml.tokens", meta)
            h.check(loaded("array")[0]["tokenizer.ggml.tokens"] == ("array[string]", ["<s>", "x\ny", "z"]),
                    "array: %r" % (loaded("array")[0]["tokenizer.ggml.tokens"],))
            harness.run("echo 1e-06 > llama.rope.freq_base", meta)
            t, v = loaded("f32")[0]["llama.rope.freq_base"]
            # the bits of the float nearest 1e-06, not a value near it
            h.check(t == "f32" and struct.pack("<f", v) == struct.pack("<f", 1e-06),
                    "f32: %r" % ((t, v),))
            arr = [str(i) for i in range(200000)]
            with open(os.path.join(meta, "tokenizer.ggml.tokens"), "w") as f:
                f.write("\n".join(arr) + "\n")
            h.check(loaded("200k")[0]["tokenizer.ggml.tokens"][1] == arr, "200k-element array")
        with h.case("create with inferred types, setfattr, rm, mv"):
            harness.run("echo 42 > general.new_int; echo true > general.new_bool; echo 0.5 > general.new_f; "
               "echo hi there > general.new_s", meta)
            kv = loaded("create")[0]
            h.check(kv.get("general.new_int") == ("i32", 42), "i32: %r" % (kv.get("general.new_int"),))
            h.check(kv.get("general.new_bool") == ("bool", True), "bool")
            h.check(kv.get("general.new_f") == ("f32", 0.5), "f32")
            h.check(kv.get("general.new_s") == ("string", "hi there"), "string")
            os.setxattr(os.path.join(meta, "general.new_int"), "user.gguf.type", b"u64")
            h.check(loaded("retype")[0]["general.new_int"] == ("u64", 42), "u64 after setfattr")
            h.check(os.getxattr(os.path.join(meta, "general.new_int"), "user.gguf.type") == b"u64", "xattr")
            try:
                os.setxattr(os.path.join(meta, "general.new_s"), "user.gguf.type", b"u8")
                h.fail("setfattr u8 on 'hi there' accepted")
            except OSError as e:
                h.check(e.errno == errno.EINVAL, "setfattr: errno %d" % e.errno)
            os.unlink(os.path.join(meta, "general.new_bool"))
            os.rename(os.path.join(meta, "general.new_f"), os.path.join(meta, "general.moved"))
            kv, order = loaded("rm/mv")
            h.check("general.new_bool" not in kv and kv.get("general.moved") == ("f32", 0.5), "rm/mv")
            h.check(sorted(os.listdir(meta)) == sorted(order), "listing %r vs %r" % (os.listdir(meta), order))
            for bad in ("Bad.Name", "a..b", "x y"):
                r = harness.run("echo 1 > '%s' && mv '%s' general.zzz" % (bad, bad), meta)
                h.check("general.zzz" in loaded("scratch")[0] or r.returncode != 0, "scratch rename %s" % bad)
                harness.run("rm -f general.zzz", meta)
            # general.alignment decides the file's layout: every change is EPERM
            al = os.path.join(meta, "general.alignment")
            before = open(model, "rb").read()
            for what, op in (("open for writing", lambda: open(al, "w").close()),
                             ("unlink", lambda: os.unlink(al)),
                             ("setfattr", lambda: os.setxattr(al, "user.gguf.type", b"u64")),
                             ("rename over it", lambda: os.rename(os.path.join(meta, "llama.context_length"), al)),
                             ("rename it", lambda: os.rename(al, os.path.join(meta, "general.align2")))):
                try:
                    op()
                    h.fail("general.alignment: %s succeeded" % what)
                except OSError as e:
                    h.check(e.errno == errno.EPERM, "general.alignment: %s: %s, want EPERM"
                            % (what, errno.errorcode.get(e.errno)))
            h.check(open(model, "rb").read() == before, "general.alignment: a refused change changed the model")
        with h.case("writes to tensor files and info are refused"):
            for f in ("tensors/out/raw", "tensors/out/f32", "tensors/out/type", "tensors/out/shape",
                      "info"):
                try:
                    open(os.path.join(mnt, f), "r+b").close()
                    h.fail("%s opened for writing" % f)
                except OSError as e:
                    h.check(e.errno == errno.EACCES, "%s: errno %d" % (f, e.errno))

        with h.case("in-place edits keep one idle journal; the unmount removes it"):
            journal = model + ".gguffs-journal"
            for v in ("8190", "8191", "8192"):
                harness.run("echo %s > llama.context_length" % v, meta)
                with open(journal, "rb") as f:
                    h.check(f.read(8) == b"GGUFFSJ0", "the journal after an edit is not idle")
            h.check(harness.beside(model) == ["m.gguf"], "files beside the model: %r" % os.listdir(tmp))
    h.check(os.listdir(tmp) == ["m.gguf"], "left after the unmount: %r" % os.listdir(tmp))

    # a new mount sees the edits; -o ro never writes
    with h.case("a new -o ro mount"), mount(model, ["-o", "ro"]) as mnt:
        meta = os.path.join(mnt, "meta")
        h.check(open(os.path.join(meta, "llama.context_length")).read() == "8192\n", "new mount sees the edit")
        before = os.stat(model).st_mtime_ns
        r = subprocess.run("echo 1 > %s/llama.context_length" % meta, shell=True, capture_output=True)
        h.check(r.returncode != 0, "-o ro accepted a write")
        h.check(os.stat(model).st_mtime_ns == before, "-o ro changed the model")
    shutil.rmtree(tmp, ignore_errors=True)
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())
