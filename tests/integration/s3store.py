# A real S3 store for the tests: a one-node OpenStack Swift (Swift All In One) with its s3api middleware on 127.0.0.1, started and stopped by the test, its logs and request count captured; awscli as the client that fills it.
"""
    with SwiftS3() as st:                   # 4 Swift servers, ports chosen here
        st.endpoint                         # http://127.0.0.1:P (path-style S3)
        st.swift_endpoint                   # http://127.0.0.1:P/v1/AUTH_test (Swift's own API)
        st.make_bucket("models", public=False)
        st.put("models", "m.gguf", local_path)      # one PutObject (no multipart)
        st.put_dir("models", folder, "sub/")        # every file, one aws run
        st.env()                            # AWS_* for the test user (test:tester / testing)
        st.aws("s3api", "list-buckets")     # /usr/bin/aws against the store
        st.requests()                       # the S3 requests the proxy has answered so far
        st.stop_proxy(); st.start_proxy()   # the store gone and back (same port)
        st.log_tail()                       # what the servers logged, for a failure

Debian 12's Swift 2.30 (packages swift-proxy swift-object swift-container
swift-account): the account, container and object servers and the proxy,
each one process (workers = 0), configured in a temporary folder: swift.conf
(the hash path salts, one storage policy), the three rings (built with
swift's RingBuilder, what swift-ring-builder runs: one device,
127.0.0.1:PORT/d1, one replica), devices in the folder with mount_check =
false.  The proxy's pipeline is `catch_errors proxy-logging cache
[gguffs_test] s3api tempauth proxy-logging proxy-server`: tempauth's user
`user_test_tester = testing .admin` is the S3 access key `test:tester` with
the secret `testing` (and `test:tester3` / `testing3`, who may read
nothing: AccessDenied); s3api answers for the region `location` (us-east-1
unless given: another one gives the 400 AuthorizationHeaderMalformed naming
the right region that AWS gives).  No memcached runs: the cache filter finds
none and Swift goes on without it.

gguffs_test (s3faults.py beside this file, on the proxy's PYTHONPATH)
stands for what Swift has not: session tokens (tempauth issues none) and
throttling.  A request carrying x-amz-security-token is refused with the
S3 error AWS sends, ExpiredToken for a token in `expired_tokens`,
InvalidToken for any other not in `valid_tokens`; and while the file
st.slowdown_path holds a number N > 0, the next N requests are answered
503 SlowDown with "Retry-After: 0" (N counted down in the file).

Swift's s3api serves no anonymous S3 requests (a request without an S3
signature is handed on to Swift's own API).  A bucket made public
(put-bucket-acl public-read: s3api sets X-Container-Read .r:*) is read
anonymously through Swift's own API: swift_endpoint + /BUCKET/KEY, which is
what a path-style S3 client with the endpoint swift_endpoint asks for.

Start: the listening sockets are made by each server (Swift binds its own;
the ports are picked by the kernel just before, so a race with another
program is possible and is retried once with new ports).  Each server
says it is ready (bound, listening, application loaded) with sd_notify's
READY=1 on the datagram socket named by NOTIFY_SOCKET, which this module
holds: start() waits for the four messages (poll, no sleeping), bounded by
START_WAIT.  Logs: every server logs by syslog over UDP to a socket of
this module (log_udp_host), kept in memory (log_tail()); stdout and stderr
(until a server is ready, then Swift sends them to its log) go to files in
the folder.  The proxy's access lines (proxy-logging) are the request
count: requests() returns the client's requests (those without a
swift.source), after a /__sync request of its own has been logged.

Bounds: a watchdog stops every server after `lifetime` seconds, or once
the proxy logged more than `max_requests` client requests.  stop() (also
on an exception in start, and on leaving the with block) sends SIGTERM to
every server, SIGKILL after STOP_WAIT, reaps them, and removes the folder.
Each server runs in a session of its own (killed as a group) and dies with
the test's process (PR_SET_PDEATHSIG), however that ends.
"""
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

import http.client

HERE = os.path.dirname(os.path.abspath(__file__))
AWS = "/usr/bin/aws"
LOOPBACK = "127.0.0.1"
ACCESS_KEY = "test:tester"
SECRET_KEY = "testing"
# a user of the account with no rights on its buckets
NOBODY_KEY, NOBODY_SECRET = "test:tester3", "testing3"
ACCOUNT = "AUTH_test"
SERVERS = ("account", "container", "object", "proxy")
# Hang guards for the store's own start, stop and clients, not performance bounds
START_WAIT = 120.0
STOP_WAIT = 20.0
CLIENT_WAIT = 120.0
SYNC_WAIT = 30.0


class StoreError(Exception):
    pass


def have_swift():
    """None if Swift (with s3api) and awscli are installed, else what is missing."""
    for b in ("/usr/bin/swift-proxy-server", "/usr/bin/swift-object-server",
              "/usr/bin/swift-container-server", "/usr/bin/swift-account-server"):
        if not os.access(b, os.X_OK):
            return "%s is missing (Debian packages swift-proxy swift-object swift-container " \
                   "swift-account)" % b
    if not os.access(AWS, os.X_OK):
        return "%s is missing (Debian package awscli)" % AWS
    try:
        import swift.common.ring  # noqa: F401
        import swift.common.middleware.s3api  # noqa: F401
    except ImportError as e:
        return "Swift's Python modules: %s (Debian package python3-swift)" % e
    return None


_SWIFT_CONF = """\
[swift-hash]
swift_hash_path_suffix = gguffs-test-suffix
swift_hash_path_prefix = gguffs-test-prefix
[storage-policy:0]
name = Policy-0
default = yes
"""

_COMMON = """\
[DEFAULT]
swift_dir = {d}
devices = {d}/srv
mount_check = false
disable_fallocate = true
bind_ip = {addr}
bind_port = {port}
workers = 0
log_name = {name}
log_udp_host = {addr}
log_udp_port = {log_port}
log_level = INFO
log_statsd_host =
eventlet_debug = false
"""

_BACKEND = _COMMON + """\
[pipeline:main]
pipeline = {name}-server
[app:{name}-server]
use = egg:swift#{name}
[{name}-replicator]
[{name}-auditor]
"""

_PROXY = _COMMON + """\
[pipeline:main]
pipeline = catch_errors proxy-logging cache gguffs_test s3api tempauth proxy-logging proxy-server
[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
node_timeout = 10
conn_timeout = 2
error_suppression_limit = 1000
[filter:tempauth]
use = egg:swift#tempauth
user_test_tester = testing .admin
user_test_tester3 = testing3
[filter:s3api]
use = egg:swift#s3api
location = {location}
[filter:gguffs_test]
paste.filter_factory = s3faults:filter_factory
valid_tokens = {valid}
expired_tokens = {expired}
slowdown_path = {d}/slowdown
[filter:cache]
use = egg:swift#memcache
memcache_servers = {addr}:{mc_port}
[filter:catch_errors]
use = egg:swift#catch_errors
[filter:proxy-logging]
use = egg:swift#proxy_logging
"""


_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    """In the child before exec: SIGKILL when the test's process ends, even
    by a signal that leaves it no time for stop() (meson's timeout)."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _free_ports(n):
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class SwiftS3:
    """Swift with s3api on 127.0.0.1 (see the module's doc)."""

    def __init__(self, location="us-east-1", valid_tokens=(), expired_tokens=(),
                 lifetime=600.0, max_requests=20000):
        self.location = location
        self.valid_tokens = list(valid_tokens)
        self.expired_tokens = list(expired_tokens)
        self.lifetime = lifetime
        self.max_requests = max_requests
        self.dir = None
        self.procs = {}
        self.ports = {}
        self.overflow = False
        self.expired = False
        self._log = []                  # (server, line)
        self._log_mu = threading.Condition()
        self._log_sock = None
        self._notify = None
        self._stopping = threading.Event()
        self._threads = []
        self._sync_n = 0
        self._client_requests = 0

    # ---- lifecycle
    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        why = have_swift()
        if why:
            raise StoreError(why)
        self.dir = tempfile.mkdtemp(prefix="gguffs-swift-")
        os.makedirs(os.path.join(self.dir, "srv", "d1"))
        with open(os.path.join(self.dir, "swift.conf"), "w") as f:
            f.write(_SWIFT_CONF)
        self._log_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._log_sock.bind((LOOPBACK, 0))
        self.log_port = self._log_sock.getsockname()[1]
        self._notify_path = os.path.join(self.dir, "notify")
        self._notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._notify.bind(self._notify_path)
        self._notify.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self._start_thread(self._collect_logs, "swift-log")
        for attempt in range(2):
            self._configure()
            try:
                self._spawn(SERVERS)
                break
            except StoreError:
                # a port taken between choosing it and Swift binding it:
                # once more with new ports
                if attempt == 1 or not self._bind_failed():
                    raise
                self._kill_all()
        self._start_thread(self._watch, "swift-watchdog")
        self.endpoint = "http://%s:%d" % (LOOPBACK, self.ports["proxy"])
        self.swift_endpoint = "%s/v1/%s" % (self.endpoint, ACCOUNT)

    def _start_thread(self, fn, name):
        th = threading.Thread(target=fn, name=name, daemon=True)
        th.start()
        self._threads.append(th)

    def _configure(self):
        ports = _free_ports(5)
        self.ports = dict(zip(SERVERS, ports))
        mc_port = ports[4]              # nobody listens there: no memcached
        for name in SERVERS:
            tmpl = _PROXY if name == "proxy" else _BACKEND
            with open(os.path.join(self.dir, name + ".conf"), "w") as f:
                f.write(tmpl.format(d=self.dir, addr=LOOPBACK, port=self.ports[name], name=name,
                                    log_port=self.log_port, location=self.location,
                                    valid=" ".join(self.valid_tokens),
                                    expired=" ".join(self.expired_tokens), mc_port=mc_port))
        self._build_rings()

    def _build_rings(self):
        """The three rings (swift-ring-builder create 4 1 1; add; rebalance;
        write_ring), made by the same library in this process."""
        from swift.common.ring import RingBuilder
        for name in ("account", "container", "object"):
            b = RingBuilder(4, 1, 1)
            b.add_dev({"id": 0, "region": 1, "zone": 1, "ip": LOOPBACK, "port": self.ports[name],
                       "device": "d1", "weight": 1.0, "meta": ""})
            b.rebalance()
            b.get_ring().save(os.path.join(self.dir, name + ".ring.gz"))

    def _server_env(self):
        env = dict(os.environ)
        env["NOTIFY_SOCKET"] = self._notify_path
        env["PYTHONPATH"] = HERE + ((":" + env["PYTHONPATH"]) if env.get("PYTHONPATH") else "")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        return env

    def _spawn(self, names):
        """Starts the servers named and waits for their READY=1."""
        env = self._server_env()
        pending = {}
        for name in names:
            out = open(os.path.join(self.dir, name + ".out"), "ab")
            # the /usr/bin scripts run with Debian's Python, whatever python3 is on PATH
            p = subprocess.Popen(["/usr/bin/swift-%s-server" % name,
                                  os.path.join(self.dir, name + ".conf")],
                                 stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env,
                                 start_new_session=True, preexec_fn=_die_with_parent)
            out.close()
            self.procs[name] = p
            pending[p.pid] = name
        deadline = time.monotonic() + START_WAIT
        poll = select.poll()
        poll.register(self._notify, select.POLLIN)
        while pending:
            for pid, name in list(pending.items()):
                if self.procs[name].poll() is not None:
                    raise StoreError("swift-%s-server exited with status %s before it was "
                                     "ready:\n%s" % (name, self.procs[name].returncode,
                                                     self.output(name)[-3000:]))
            left = deadline - time.monotonic()
            if left <= 0:
                raise StoreError("Swift servers not ready after %.0f s: %s\n%s" % (
                    START_WAIT, ", ".join(sorted(pending.values())), self.log_tail()))
            # a server's exit is seen on the next round (at most 1 s later)
            if not poll.poll(1000 * min(left, 1.0)):
                continue
            msg, anc, _, _ = self._notify.recvmsg(4096, socket.CMSG_SPACE(12))
            # SO_PASSCRED: the kernel names the sender (pid, uid, gid)
            pid = None
            for level, typ, data in anc:
                if level == socket.SOL_SOCKET and typ == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("iII", data[:12])[0]
            if b"READY=1" in msg and pid in pending:
                del pending[pid]

    def _bind_failed(self):
        return any("Address already in use" in self.output(n) or
                   "Could not bind" in self.output(n) for n in SERVERS)

    def output(self, name):
        try:
            with open(os.path.join(self.dir, name + ".out"), "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def _collect_logs(self):
        s = self._log_sock
        while not self._stopping.is_set():
            r, _, _ = select.select([s], [], [], 0.5)
            if not r:
                continue
            try:
                data = s.recv(65536)
            except OSError:
                return
            line = data.decode(errors="replace")
            # "<PRI>name: message"
            if line.startswith("<"):
                line = line[line.find(">") + 1:]
            name, _, msg = line.partition(": ")
            with self._log_mu:
                self._log.append((name, msg.rstrip("\n\0")))
                if name.startswith("proxy") and _client_access(msg):
                    self._client_requests += 1
                self._log_mu.notify_all()

    def _watch(self):
        deadline = time.monotonic() + self.lifetime
        with self._log_mu:
            while not self._stopping.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    self.expired = True
                    break
                if self._client_requests > self.max_requests:
                    self.overflow = True
                    break
                self._log_mu.wait(min(left, 1.0))
        if not self._stopping.is_set():
            self._kill_all()

    def log_tail(self, n=60):
        """The last n lines the servers logged, and their stderr."""
        with self._log_mu:
            lines = ["%s: %s" % e for e in self._log[-n:]]
        for name in SERVERS:
            out = self.output(name).strip()
            if out:
                lines.append("--- swift-%s-server stdout/stderr:\n%s" % (name, out[-1500:]))
        return "\n".join(lines)

    def _kill_all(self, names=SERVERS):
        for name in names:
            p = self.procs.get(name)
            if p and p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except OSError:
                    pass
        for name in names:
            p = self.procs.get(name)
            if not p:
                continue
            try:
                p.wait(STOP_WAIT)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
                p.wait(STOP_WAIT)
            # anything left in its session (a child it forked)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass

    def stop(self):
        self._stopping.set()
        self._kill_all()
        with self._log_mu:
            self._log_mu.notify_all()
        for th in self._threads:
            th.join(STOP_WAIT)
        for s in (self._log_sock, self._notify):
            if s:
                s.close()
        self._log_sock = self._notify = None
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    # ---- the store gone and back
    def stop_proxy(self):
        """The proxy killed (SIGKILL): connections to the store are refused
        until start_proxy()."""
        p = self.procs["proxy"]
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(STOP_WAIT)

    def start_proxy(self):
        """The proxy again, on the same port (waits for its READY=1)."""
        self._spawn(("proxy",))

    # ---- clients
    def env(self, **extra):
        """An environment for awscli or gguffs as the test user, no files."""
        e = dict(os.environ)
        for k in list(e):
            if k.startswith("AWS_"):
                del e[k]
        e.update({"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                  "AWS_REGION": self.location, "AWS_CONFIG_FILE": "/dev/null",
                  "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
                  "AWS_EC2_METADATA_DISABLED": "true"})
        e.update(extra)
        return e

    def aws_env(self):
        """awscli's environment: the test user, and a config file of its
        own that makes every upload one PutObject (multipart uploads need
        Swift's slo middleware, which this store has not)."""
        cfg = os.path.join(self.dir, "aws-config")
        if not os.path.exists(cfg):
            with open(cfg, "w") as f:
                f.write("[default]\ns3 =\n    multipart_threshold = 5GB\n")
        return self.env(AWS_CONFIG_FILE=cfg)

    def aws(self, *args, env=None, check=True):
        """/usr/bin/aws --endpoint-url ENDPOINT ARGS as the test user:
        (returncode, stdout, stderr)."""
        r = subprocess.run([AWS, "--endpoint-url", self.endpoint] + list(args),
                           capture_output=True, stdin=subprocess.DEVNULL, timeout=CLIENT_WAIT,
                           env=env or self.aws_env())
        if check and r.returncode != 0:
            raise StoreError("aws %s: exit %d: %s\n%s" % (" ".join(args[:3]), r.returncode,
                                                          r.stderr.decode(errors="replace")[-2000:],
                                                          self.log_tail(20)))
        return r.returncode, r.stdout, r.stderr

    def make_bucket(self, bucket, public=False):
        self.aws("s3api", "create-bucket", "--bucket", bucket)
        if public:
            self.aws("s3api", "put-bucket-acl", "--bucket", bucket, "--acl", "public-read")

    def put(self, bucket, key, path):
        """One PutObject of the file at path: the object's ETag."""
        _, out, _ = self.aws("s3api", "put-object", "--bucket", bucket, "--key", key,
                             "--body", path)
        return json.loads(out)["ETag"]

    def put_dir(self, bucket, folder, prefix=""):
        """Every file of folder as BUCKET/PREFIX/NAME, one PutObject each,
        in one awscli run (aws s3 cp --recursive)."""
        dest = "s3://%s/%s" % (bucket, prefix)
        self.aws("s3", "cp", "--recursive", "--only-show-errors", folder, dest)

    def delete(self, bucket, key):
        self.aws("s3api", "delete-object", "--bucket", bucket, "--key", key)

    def slowdown(self, n):
        """The next n requests are answered 503 SlowDown (Retry-After: 0)."""
        tmp = os.path.join(self.dir, "slowdown.tmp")
        with open(tmp, "w") as f:
            f.write("%d\n" % n)
        os.rename(tmp, os.path.join(self.dir, "slowdown"))

    def requests(self):
        """The client requests the proxy answered so far (every one logged
        before a /__sync request of this module was): a list of dicts
        method, path, status, bytes, range is not logged by Swift."""
        self._sync_n += 1
        tag = "/__sync%d" % self._sync_n
        c = http.client.HTTPConnection(LOOPBACK, self.ports["proxy"], timeout=SYNC_WAIT)
        try:
            c.request("GET", tag)
            c.getresponse().read()
        finally:
            c.close()
        deadline = time.monotonic() + SYNC_WAIT
        with self._log_mu:
            while True:
                out = []
                synced = False
                for name, msg in self._log:
                    if not name.startswith("proxy"):
                        continue
                    a = _client_access(msg)
                    if not a:
                        continue
                    if a["path"].startswith("/__sync"):
                        synced |= a["path"] == tag
                        continue
                    out.append(a)
                if synced:
                    return out
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StoreError("the proxy did not log %s within %.0f s" % (tag, SYNC_WAIT))
                self._log_mu.wait(left)


def _client_access(msg):
    """A proxy-logging access line of a client's request (no swift.source):
    {method, path, status, bytes, user_agent}, else None."""
    f = msg.split(" ")
    # client_ip remote_addr datetime method path protocol status referer
    # user_agent auth_token bytes_recvd bytes_sent client_etag txn_id
    # headers request_time source log_info start end policy
    if len(f) < 18 or f[3] not in ("GET", "HEAD", "PUT", "POST", "DELETE"):
        return None
    if f[16] != "-":
        return None
    return {"method": f[3], "path": urllib.parse.unquote(f[4]), "status": int(f[6]),
            "user_agent": urllib.parse.unquote(f[8]),
            "bytes": int(f[11]) if f[11].isdigit() else 0}


if __name__ == "__main__":
    # python3 s3store.py: starts a store, fills a bucket, prints what it logged
    with SwiftS3() as st:
        t0 = time.monotonic()
        st.make_bucket("bkt", public=True)
        p = os.path.join(st.dir, "x")
        with open(p, "wb") as f:
            f.write(b"hello" * 1000)
        print("etag", st.put("bkt", "x", p))
        print(st.requests())
        print(st.log_tail(10))
        sys.exit(0)
