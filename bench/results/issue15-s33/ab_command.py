"""A/B of the real `mcp-proxy` command, admin API on (the default) against off, c=16 small
`tools/call`, for machines without wrk: load from autocannon (npm) on CPU 0, `bench/upstream_fast.py`
and every proxy on CPU 1, info JSON logs to files. Rounds alternate the order; the ratio is taken per
round (one round's two runs are seconds apart), then its median.

    npm install --prefix /tmp/s33ac autocannon@8
    python3 bench/results/issue15-s33/ab_command.py CHECKOUT[,CHECKOUT...] [ROUNDS] [SECONDS]

Every request carries the same JSON-RPC id: autocannon's `-I` (a fresh id per request) sends a
Content-Length computed before the id is put in, so the proxy waits for bytes that never come."""
import json, os, socket, subprocess, sys, tempfile, time, statistics
from pathlib import Path
REPO = Path(__file__).resolve().parents[3]
ROOTS = sys.argv[1].split(",")  # checkouts measured, each run with this repo's .venv on its PYTHONPATH
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 6
SECS = sys.argv[3] if len(sys.argv) > 3 else "4"
PY = str(REPO / ".venv/bin/python")
AC = os.environ.get("AUTOCANNON", "/tmp/s33ac/node_modules/.bin/autocannon")
LOGS = Path(tempfile.mkdtemp(prefix="ab-command-"))

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

procs = []
up_port = free_port()
up = subprocess.Popen(["taskset", "-c", "1", PY, str(REPO / "bench/upstream_fast.py"), "--port", str(up_port)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
procs.append(up)
up.stdout.readline()
upstream = f"http://127.0.0.1:{up_port}/mcp"
proxies = {}
for root in ROOTS:
    for admin in ("on", "off"):
        port = free_port()
        args = ["taskset", "-c", "1", PY, "-c", "import sys; from proxy.launcher import main; sys.exit(main())" if os.path.exists(f"{root}/proxy/launcher.py") else "import sys; from proxy.cli import main; sys.exit(main(sys.argv[1:]))",
                "--upstream", upstream, "--listen", f"127.0.0.1:{port}", "--log-format", "json"]
        args += ["--admin", f"127.0.0.1:{free_port()}"] if admin == "on" else ["--no-admin-enabled"]
        env = dict(os.environ, PYTHONPATH=root)
        log = open(LOGS / f"{os.path.basename(root)}-{admin}.log", "w")
        p = subprocess.Popen(args, env=env, stdout=log, stderr=log, cwd=root)
        procs.append(p)
        proxies[f"{os.path.basename(root)}-{admin}"] = port
time.sleep(4)
body = '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"small","arguments":{"text":"hello"}}}'
def run(port):
    out = subprocess.run(["taskset", "-c", "0", AC, "-c", "16", "-d", SECS, "-m", "POST", "-j",
        "-H", "Content-Type=application/json", "-H", "Accept=application/json, text/event-stream",
        "-H", "MCP-Protocol-Version=2025-11-25", "-H", "Mcp-Session-Id=bench-upstream-session",
        "-b", body, f"http://127.0.0.1:{port}/mcp"], capture_output=True, text=True)
    d = json.loads(out.stdout)
    if d["non2xx"] or d["errors"]:
        print("ERRORS", d["non2xx"], d["errors"], file=sys.stderr)
    return d["requests"]["average"]
try:
    for name, port in proxies.items():  # warm
        run(port)
    rps = {k: [] for k in proxies}
    names = list(proxies)
    for r in range(ROUNDS):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            rps[name].append(run(proxies[name]))
        print(r, {k: v[-1] for k, v in rps.items()}, flush=True)
    for k, v in rps.items():
        print(k, "median", statistics.median(v), v)
    for root in ROOTS:
        b = os.path.basename(root)
        ratios = [a / o for a, o in zip(rps[f"{b}-on"], rps[f"{b}-off"])]
        print(b, "on/off per round", [round(x, 3) for x in ratios], "median", round(statistics.median(ratios), 3))
finally:
    for p in procs:
        p.terminate()
    for p in procs:
        try: p.wait(5)
        except Exception: p.kill()
