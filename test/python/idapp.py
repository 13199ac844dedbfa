"""idapp.py -- the WSGI application test_gunicorn.py and test_uwsgi.py serve from a pre-fork
server: one snowflake.Fenced handle made when the application is loaded, in the master before
the fork (gunicorn --preload, uWSGI without lazy-apps), and used by every worker.

  GET /ids?batches=K   K x next_ids(1000), as 8-byte big-endian ids; X-Pid: the worker's pid
  GET /pid             the worker's pid (nothing else: no id, no claim)
A FencedError or StartError answers 503 with its message.

Settings from the environment: SFPY_ZOOKEEPER, SFPY_PATH, SFPY_SESSION_MS, SFPY_LAZY."""
import array
import os
import sys
from urllib.parse import parse_qs

import snowflake

HANDLE = snowflake.Fenced(os.environ["SFPY_ZOOKEEPER"], path=os.environ["SFPY_PATH"],
                          datacenter_id=1,
                          session_timeout_ms=int(os.environ.get("SFPY_SESSION_MS", "10000")),
                          lazy=os.environ.get("SFPY_LAZY") == "1")


def application(environ, start_response):
    pid = str(os.getpid()).encode()
    if environ.get("PATH_INFO") == "/pid":
        start_response("200 OK", [("Content-Type", "text/plain"),
                                  ("Content-Length", str(len(pid)))])
        return [pid]
    batches = int(parse_qs(environ.get("QUERY_STRING", "")).get("batches", ["1"])[0])
    ids = array.array("q")
    try:
        for _ in range(batches):
            ids.extend(HANDLE.next_ids(1000))
    except snowflake.Error as e:
        body = ("%s: %s\n" % (type(e).__name__, e)).encode()
        start_response("503 Service Unavailable", [("Content-Type", "text/plain"),
                                                   ("Content-Length", str(len(body)))])
        return [body]
    if sys.byteorder == "little":
        ids.byteswap()
    body = ids.tobytes()
    start_response("200 OK", [("Content-Type", "application/octet-stream"),
                              ("Content-Length", str(len(body))), ("X-Pid", pid.decode())])
    return [body]
