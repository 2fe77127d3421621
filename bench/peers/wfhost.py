# The kit's adapter for wfhost, as an operator would run it: appended to
# the copy of the kit's peerlib.py by bench/peers/run (so it sees Peer,
# which, _toml, _Done and the rest of peerlib), where it replaces the
# kit's own Wfhost adapter.
#
# - every test child is hosted by `wfhost-child exec --drain cancel -- child …`;
# - the restart policy is wfhost's built-in one (restart.healthy_after = 1s:
#   the crash workload's children run 1.5 s, so each crash restarts at once;
#   the fast-crash children, up 0.3 s, meet its backoff, as they meet s6's
#   and runit's 1 s);
# - stopping one service is `wfhost drain NAME --wait`, which returns once
#   the child is gone (a drain SIGTERMs the command; when the drain budget
#   runs out with it still running, the supervisor signs and journals a
#   cancel and wfhost-child SIGKILLs it: the stop timeout maps to
#   drain_timeout, drain_deadline and kill_timeout alike);
# - the memory limit is `recycle.max_rss` at the built-in policy_interval:
#   the RSS bound is watched between ticks (bench/README.md, "RSS").
#
# Knobs (environment): WFHOST_DIR or WFHOST_BIN_DIR (the binaries),
# WFHOST_POLICY_INTERVAL (set a policy_interval), WFHOST_RESTART=fast
# (backoff 1 ms, for comparing with the kit's earlier runs).


class Wfhost(Peer):
    """`wfhost supervise`, each child under `wfhost-child exec`."""
    name = "wfhost"
    supports_mem_limit = "max_rss (recycle = drain, SIGTERM, respawn)"
    notes = "stop = `wfhost drain NAME --wait`"

    FAST_RESTART = {"backoff_initial": "1ms", "backoff_max": "1ms", "max_restarts": 1000, "period": "60s"}

    def _bin(self, prog):
        return which(prog, WFHOST_DIR)

    def configure(self, svcs):
        self.svcs = svcs
        self.conf = os.path.join(self.wd, "wfhost.toml")
        self.wfhost = self._bin("wfhost")
        child = self._bin("wfhost-child")
        sup = {"state_dir": os.path.join(self.wd, "state")}
        pi = os.environ.get("WFHOST_POLICY_INTERVAL")
        if pi:
            sup["policy_interval"] = pi
        out = ["[supervisor]"] + [f"{k} = {_toml(v)}" for k, v in sup.items()] + [""]
        if os.environ.get("WFHOST_RESTART") == "fast":
            out += ["[defaults]", f"restart = {_toml(self.FAST_RESTART)}", ""]
        for s in svcs:
            t = f"{int(round(s.stop_timeout * 1000))}ms"
            d = {"id": s.name,
                 "command": [child, "exec", "--drain", "cancel", "--"] + s.argv(self.evdir),
                 "env": {"EVDIR": self.evdir},
                 "drain_timeout": t, "drain_deadline": t, "kill_timeout": t}
            if s.mem_limit_mb:
                d["recycle"] = {"max_rss": f"{s.mem_limit_mb}MiB"}
            out.append("[[deployment]]")
            out.extend(f"{k} = {_toml(v)}" for k, v in d.items())
            out.append("")
        with open(self.conf, "w") as f:
            f.write("\n".join(out))

    def launch(self):
        self.p = self.popen([self.wfhost, "supervise", "--config", self.conf])

    def stop_service(self, name):
        r = self.sh([self.wfhost, "drain", name, "--wait", "--config", self.conf], timeout=130)
        if r.returncode:
            print(f"[wfhost] drain {name} --wait: rc {r.returncode}: {r.stdout.strip()}", file=sys.stderr)
        return r

    def root_pids(self):
        return [self.p.pid]

    def shutdown(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)   # drain every child under its budget, stop, exit 0
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                print("[wfhost] supervisor still running 30 s after SIGTERM", file=sys.stderr)


PEERS["wfhost"] = Wfhost
