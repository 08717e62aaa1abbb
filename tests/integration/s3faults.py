# The test store's stand-in for what Swift has not (a WSGI filter of tests/integration/s3store.py's proxy): session tokens refused as AWS refuses them, and 503 SlowDown on demand.
"""
In the proxy's pipeline just before s3api:

  - a request with an x-amz-security-token header: a token listed in
    `expired_tokens` gets AWS's 400 ExpiredToken error document, one not in
    `valid_tokens` its 400 InvalidToken; a valid one goes on (s3api then
    checks the signature, which covers the header);
  - while the file `slowdown_path` holds a number N > 0, a request is
    answered 503 SlowDown with "Retry-After: 0" and N - 1 is written back.

The error documents are s3api's own (swift.common.middleware.s3api.s3response).
"""
import os

from swift.common.middleware.s3api.s3response import ExpiredToken, InvalidToken, SlowDown


class Filter:
    def __init__(self, app, conf):
        self.app = app
        self.valid = set(conf.get("valid_tokens", "").split())
        self.expired = set(conf.get("expired_tokens", "").split())
        self.slowdown_path = conf.get("slowdown_path")

    def _slow(self):
        if not self.slowdown_path:
            return False
        try:
            with open(self.slowdown_path) as f:
                n = int(f.read().strip() or 0)
        except (OSError, ValueError):
            return False
        if n <= 0:
            return False
        with open(self.slowdown_path, "w") as f:
            f.write("%d\n" % (n - 1))
        return True

    def __call__(self, env, start_response):
        if env.get("PATH_INFO", "").startswith("/__sync"):
            return self.app(env, start_response)
        if self._slow():
            resp = SlowDown(headers={"Retry-After": "0"})
            return resp(env, start_response)
        tok = env.get("HTTP_X_AMZ_SECURITY_TOKEN")
        if tok is not None:
            if tok in self.expired:
                return ExpiredToken()(env, start_response)
            if tok not in self.valid:
                return InvalidToken()(env, start_response)
        return self.app(env, start_response)


def filter_factory(global_conf, **local_conf):
    conf = dict(global_conf)
    conf.update(local_conf)

    def factory(app):
        return Filter(app, conf)
    return factory
