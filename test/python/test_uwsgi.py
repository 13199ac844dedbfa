#!/usr/bin/python3
"""test_uwsgi.py -- snowflake.Fenced under Debian's uWSGI: a master and 4 processes, the
application loaded in the master before the fork (lazy-apps off, the default); the checks of
prefork.py: 1 M ids with no repeat, a pair per worker apart from the master's, a worker killed
and replaced, workers recycled by --max-requests releasing their pairs, a lazy handle leaving
the master without one. uWSGI's master runs no Python exit function when it stops, so the
pair of a handle it started is released only when its session expires (the manual says to
make the master's handle lazy). Not under a sanitizer (it forks)."""
import os
import signal
import sys

import sfpy_test
from sfpy_test import sftest

sfpy_test.require_module(forks=True)
sftest.require_zookeeper_client()
import prefork  # noqa: E402

UWSGI = "/usr/bin/uwsgi"
PLUGIN = "/usr/lib/uwsgi/plugins/python3_plugin.so"
for path, package in ((UWSGI, "uwsgi-core"), (PLUGIN, "uwsgi-plugin-python3")):
    if not os.path.exists(path):
        print("%s is missing: apt-get install %s (scripts/deps test does)" % (path, package))
        sys.exit(1)


def make(name, port, env, extra):
    argv = [UWSGI, "--plugin", "python3", "--master", "--processes", str(prefork.WORKERS),
            "--http-socket", "127.0.0.1:%d" % port, "--chdir", prefork.APP_DIR,
            "--wsgi-file", "idapp.py", "--need-app", "--die-on-term",
            "--disable-logging"] + list(extra)
    return prefork.Server("uwsgi-" + name, argv, port, env)


if __name__ == "__main__":
    # uWSGI recycles a worker only once it lived min-worker-lifetime (10 s by default).
    prefork.run_checks("uwsgi", make, signal.SIGTERM,
                       ("--max-requests", "10", "--min-worker-lifetime", "0"),
                       master_exits_python=False)
