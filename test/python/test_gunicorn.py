#!/usr/bin/python3
"""test_gunicorn.py -- snowflake.Fenced under Debian's gunicorn: --preload (the handle made
in the master) and 4 sync workers; the checks of prefork.py: 1 M ids with no repeat, a pair
per worker apart from the master's, a worker killed and replaced, workers recycled by
--max-requests releasing their pairs, a lazy handle leaving the master without one. Not
under a sanitizer (it forks)."""
import os
import signal
import sys

import sfpy_test
from sfpy_test import sftest

sfpy_test.require_module(forks=True)
sftest.require_zookeeper_client()
import prefork  # noqa: E402

GUNICORN = "/usr/bin/gunicorn"  # Debian's, on /usr/bin/python3
if not os.access(GUNICORN, os.X_OK):
    print("gunicorn is not installed: apt-get install gunicorn (scripts/deps test does)")
    sys.exit(1)


def make(name, port, env, extra):
    argv = [GUNICORN, "--preload", "--workers", str(prefork.WORKERS), "--worker-class", "sync",
            "--bind", "127.0.0.1:%d" % port, "--chdir", prefork.APP_DIR, "--timeout", "120",
            "--graceful-timeout", "60", "--log-level", "info"] + list(extra) + ["idapp:application"]
    return prefork.Server("gunicorn-" + name, argv, port, env)


if __name__ == "__main__":
    prefork.run_checks("gunicorn", make, signal.SIGTERM,
                       ("--max-requests", "10", "--max-requests-jitter", "0"))
