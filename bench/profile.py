"""`python -m bench.profile`: where the gateway's time goes under load (pyinstrument).

Starts the mock and the gateway like bench.run, but the gateway runs under pyinstrument
(`.venv/bin/pip install pyinstrument`; not a project dependency), drives it with wrk at
--concurrency for --seconds, stops it with SIGINT so the profiler writes its report,
and prints the report (text call tree, or --html FILE).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import orjson

from bench import config, procs


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.split("\n")[0])
    p.add_argument("--server", choices=procs.SERVERS, default="daphne")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--stream", action="store_true", help="profile 20-frame streams instead of plain completions")
    p.add_argument("--html", type=Path, default=None, help="write an HTML report here instead of printing text")
    args = p.parse_args(argv)
    if not importlib.util.find_spec("pyinstrument"):
        raise SystemExit("pyinstrument is not installed: `.venv/bin/pip install pyinstrument` (profiling only)")
    work = Path(tempfile.mkdtemp(prefix="switchboard-profile-"))
    report = args.html or (work / "profile.txt")
    started: list[procs.Proc] = []
    try:
        mock, mock_url = procs.start_mock(work)
        started.append(mock)
        for script in config.mock_scripts():
            procs.http(
                "POST", f"{mock_url}/_control/script", orjson.dumps(script), {"Content-Type": "application/json"}
            )
        env, key = procs.prepare_database(work, "small", config.config_yaml(mock_url), config.ORG, config.AGENT)
        port = procs.free_port()
        server = procs.server_argv(args.server, port)
        renderer = ["-r", "html"] if args.html else ["-r", "text", "--show-all"]
        argv_ = [procs.PY, "-m", "pyinstrument", *renderer, "-o", str(report), "-m", *server[2:]]
        gw = procs.Proc("gateway", argv_, work, {"DJANGO_SETTINGS_MODULE": "gateway_project.settings", **env})
        started.append(gw)
        url = f"http://127.0.0.1:{port}"
        procs.wait_http(f"{url}/health", gw, timeout=90)
        model = config.STREAM[0] if args.stream else config.CHAT[0]
        body = config.chat_body(model, stream=args.stream)
        result = procs.wrk(
            f"{url}/v1/chat/completions", body, {"Authorization": f"Bearer {key}"}, args.concurrency, args.seconds, work
        )
        print(f"under the profiler: {result['rps']} req/s, p99 {result['p99_ms']} ms, errors {result['errors']}")
        os.killpg(gw.pid, signal.SIGINT)
        deadline = time.monotonic() + 60
        while gw.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        gw.stop()
        if args.html:
            print(f"HTML profile written to {report}")
        elif report.exists():
            print(report.read_text())
        else:
            print(f"the profiler wrote no report; gateway log:\n{gw.tail(60)}")
    finally:
        for proc in reversed(started):
            proc.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
