#!/usr/bin/env bash
# Checks the deployment assets under deploy/ against each other and against
# the binaries: systemd units pass `systemd-analyze verify`, the Kubernetes
# manifests are consistent (selectors, ports, volumes, the worker's flags,
# the config in the ConfigMap), kustomize renders them, the Dockerfile has its
# required parts, the runtime-package script finds the owners of a real
# binary's libraries, and every flag the assets pass exists in --help of the
# built binaries. Tools that are missing turn their checks into skips.
# (The YAML configs themselves are parsed by tests/gateway/test_config.c.)
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
cd "$ROOT" || exit 1

# ---- systemd ----
if command -v systemd-analyze >/dev/null 2>&1; then
  mkdir -p "$TMP/units"
  # verify needs existing executables: point ExecStart at /bin/true
  for u in deploy/pagoda-gateway.service deploy/pagoda-worker@.service; do
    sed -e 's#/usr/local/bin/pagoda-[a-z]*#/bin/true#' "$u" >"$TMP/units/$(basename "$u")"
  done
  cp "$TMP/units/pagoda-worker@.service" "$TMP/units/pagoda-worker@tinyllama.service"
  for u in pagoda-gateway.service pagoda-worker@tinyllama.service; do
    out=$(cd "$TMP/units" && systemd-analyze verify "./$u" 2>&1)
    # verify exits 0 on ignored settings; any message is a finding
    if [[ -z $out ]]; then ok "systemd-analyze verify $u: clean"
    else fail "systemd-analyze verify $u: $out"; fi
  done
  for u in deploy/pagoda-gateway.service deploy/pagoda-worker@.service; do
    for key in NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes PrivateTmp=yes \
               MemoryDenyWriteExecute=yes 'RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX' \
               Restart=on-failure RestartSec= LimitNOFILE=; do
      grep -q "^$key" "$u" || fail "$u lacks $key"
    done
  done
  # shellcheck disable=SC2016 # a literal $MAINPID
  if grep -q '^ExecReload=/bin/kill -HUP \$MAINPID$' deploy/pagoda-gateway.service; then
    ok "gateway unit reloads with SIGHUP"
  else
    fail "gateway unit: ExecReload must send SIGHUP"
  fi
else
  skip "systemd-analyze not installed: units not verified"
fi

# ---- Kubernetes ----
PY=/usr/bin/python3
if [[ -x $PY ]] && $PY -c 'import yaml' 2>/dev/null; then
  if $PY - deploy/k8s <<'PYEOF'
import glob, os, sys, yaml

d = sys.argv[1]
bad = []
def need(cond, msg):
    if not cond:
        bad.append(msg)

kust = yaml.safe_load(open(os.path.join(d, "kustomization.yaml")))
docs = []
for f in kust["resources"]:
    for doc in yaml.safe_load_all(open(os.path.join(d, f))):
        if doc:
            docs.append((f, doc))
listed = set(kust["resources"]) | {"kustomization.yaml"}
for f in kust["configMapGenerator"][0]["files"]:
    listed.add(f)
for f in glob.glob(os.path.join(d, "*.yaml")):
    need(os.path.basename(f) in listed, f"{f} is not referenced by kustomization.yaml")
conf = yaml.safe_load(open(os.path.join(d, kust["configMapGenerator"][0]["files"][0])))
cm_name = kust["configMapGenerator"][0]["name"]

def port_of(hostport):
    return int(hostport.rsplit(":", 1)[1])

by_kind = {}
for f, doc in docs:
    for k in ("apiVersion", "kind", "metadata"):
        need(k in doc, f"{f}: missing {k}")
    by_kind.setdefault(doc["kind"], []).append(doc)

pvcs = {p["metadata"]["name"] for p in by_kind.get("PersistentVolumeClaim", [])}
services = {s["metadata"]["name"]: s for s in by_kind.get("Service", [])}
WORKER_FLAGS = {"--gateway", "--model", "--max-seqs", "--max-batch-tokens", "--kv-blocks", "--threads"}
model_names = {m["name"] for m in conf.get("models", [])}
gateway_labels = None
worker_models = set()
flags_used = {"pagoda-gateway": set(), "pagoda-worker": set()}

for dep in by_kind.get("Deployment", []):
    name = dep["metadata"]["name"]
    spec = dep["spec"]; tpl = spec["template"]; pod = tpl["spec"]
    sel = spec["selector"]["matchLabels"]; labels = tpl["metadata"]["labels"]
    need(all(labels.get(k) == v for k, v in sel.items()), f"{name}: selector does not match pod labels")
    need(pod.get("securityContext", {}).get("runAsNonRoot") is True, f"{name}: not runAsNonRoot")
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    for c in pod["containers"]:
        need("requests" in c.get("resources", {}), f"{name}/{c['name']}: no resource requests")
        need(c.get("securityContext", {}).get("allowPrivilegeEscalation") is False,
             f"{name}/{c['name']}: allowPrivilegeEscalation not false")
        for m in c.get("volumeMounts", []):
            need(m["name"] in vols, f"{name}: mount {m['name']} has no volume")
        for v in vols.values():
            if "persistentVolumeClaim" in v:
                need(v["persistentVolumeClaim"]["claimName"] in pvcs, f"{name}: unknown PVC")
        cmd = c["command"][0]; args = [str(a) for a in c.get("args", [])]
        flags_used.setdefault(cmd, set()).update(a for a in args if a.startswith("--"))
        if cmd == "pagoda-gateway":
            gateway_labels = labels
            i = args.index("--config"); cfg_path = args[i + 1]
            mounts = [m for m in c["volumeMounts"] if m["mountPath"] == cfg_path]
            need(len(mounts) == 1 and vols[mounts[0]["name"]].get("configMap", {}).get("name") == cm_name,
                 f"{name}: --config {cfg_path} is not the {cm_name} ConfigMap")
            ports = {p["name"]: p["containerPort"] for p in c["ports"]}
            need(ports.get("http") == port_of(conf["listen"]), f"{name}: http port != config listen")
            need(ports.get("zmq") == port_of(conf["worker_endpoint"]), f"{name}: zmq port != worker_endpoint")
            need(conf.get("keys_file", "").startswith(
                     next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == "keys") + "/"),
                 f"{name}: keys_file is not on the keys Secret mount")
            for p in ("readinessProbe", "livenessProbe"):
                need(c.get(p, {}).get("httpGet", {}).get("path") == "/health", f"{name}: {p} not on /health")
        elif cmd == "pagoda-worker":
            need(set(a for a in args if a.startswith("--")) <= WORKER_FLAGS, f"{name}: unknown worker flag")
            gw = args[args.index("--gateway") + 1]
            host, port = gw[len("tcp://"):].rsplit(":", 1)
            need(gw.startswith("tcp://") and host in services, f"{name}: --gateway {gw} is not a Service")
            if host in services:
                sp = {p["name"]: p for p in services[host]["spec"]["ports"]}
                need(sp.get("zmq", {}).get("port") == int(port), f"{name}: --gateway port is not the Service zmq port")
            mname, mpath = args[args.index("--model") + 1].split("=", 1)
            worker_models.add(mname)
            need(mname in model_names, f"{name}: model {mname} not in the gateway config")
            need(any(mpath.startswith(m["mountPath"] + "/") for m in c["volumeMounts"]),
                 f"{name}: {mpath} is not on a mounted volume")
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            threads = args[args.index("--threads") + 1]
            need(env.get("OMP_NUM_THREADS") == threads, f"{name}: OMP_NUM_THREADS != --threads")
            need(env.get("OPENBLAS_NUM_THREADS") == "1", f"{name}: OPENBLAS_NUM_THREADS is not 1 (common/proc_env.h)")
            need(labels.get("app.kubernetes.io/component") == "worker", f"{name}: not labelled as a worker")

need(gateway_labels is not None, "no gateway Deployment")
need(worker_models == model_names, f"models {model_names} vs worker Deployments {worker_models}")
need(all(m.get("replicas") == 0 for m in conf.get("models", [])),
     "k8s config: models must have replicas: 0 (workers run in their own pods)")
for name, s in services.items():
    need(all(gateway_labels.get(k) == v for k, v in s["spec"]["selector"].items()),
         f"Service {name} does not select the gateway")
for np in by_kind.get("NetworkPolicy", []):
    need(all(gateway_labels.get(k) == v for k, v in np["spec"]["podSelector"]["matchLabels"].items()),
         "NetworkPolicy does not select the gateway")
    zmq_rules = [r for r in np["spec"]["ingress"] if any(p["port"] == 5557 for p in r["ports"])]
    need(len(zmq_rules) == 1 and zmq_rules[0]["from"][0]["podSelector"]["matchLabels"]
         .get("app.kubernetes.io/component") == "worker", "NetworkPolicy: 5557 not limited to workers")

open(os.environ.get("FLAGS_OUT", "/dev/null"), "w").write(
    "\n".join(f"{b} {f}" for b, fs in flags_used.items() for f in sorted(fs)) + "\n")
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
PYEOF
  then ok "k8s manifests are consistent (selectors, ports, volumes, flags, config)"
  else fail "k8s manifests are inconsistent (see above)"; fi
else
  skip "python3 with yaml not available: k8s manifests not checked"
fi
if command -v kubectl >/dev/null 2>&1; then
  if out=$(kubectl kustomize deploy/k8s 2>&1) && grep -q 'name: pagoda-config-[a-z0-9]' <<<"$out"; then
    ok "kubectl kustomize deploy/k8s renders, ConfigMap generated"
  else
    fail "kubectl kustomize deploy/k8s: ${out:0:300}"
  fi
else
  skip "kubectl not installed: kustomization not rendered"
fi

# ---- Docker ----
df=deploy/Dockerfile
n_from=$(grep -c '^FROM debian:12' "$df")
last_user=$(grep '^USER ' "$df" | tail -1 | awk '{print $2}')
if [[ $n_from -eq 2 && -n $last_user && ${last_user%%:*} != root && ${last_user%%:*} != 0 ]] \
   && grep -q '^EXPOSE 8080 5557$' "$df" && grep -q '^HEALTHCHECK .*' "$df" \
   && grep -A1 '^HEALTHCHECK' "$df" | grep -q '/health' \
   && grep -q 'make .*build/pagoda-gateway build/pagoda-worker' "$df"; then
  ok "Dockerfile: two Debian 12 stages, non-root user, ports, /health check"
else
  fail "Dockerfile misses a required part"
fi
# every file the Dockerfile COPYs from the context exists and is not ignored
missing=""
while read -r src; do
  [[ -e $src ]] || missing+=" $src"
done < <(grep '^COPY ' "$df" | grep -v -- '--from' | awk '{for (i = 2; i < NF; i++) print $i}' | grep -v '^\.$')
if [[ -z $missing ]]; then ok "Dockerfile: COPY sources exist"; else fail "Dockerfile: missing$missing"; fi
# the runtime-package list must name an installed package for each library
probe=$(find "$BUILD" -maxdepth 3 -type f -name 'test_config' -perm -u+x 2>/dev/null | head -1)
[[ -x $BUILD/pagoda-gateway ]] && probe=$BUILD/pagoda-gateway
if [[ -n $probe ]] && command -v dpkg >/dev/null 2>&1; then
  # shellcheck disable=SC2016 # ${Status} is dpkg-query's, not ours
  if pk=$(bash deploy/docker/runtime-packages.sh "$probe") && [[ -n $pk ]] \
     && grep -qx 'libyaml-0-2' <<<"$pk" \
     && ! xargs dpkg-query -W -f='${Status}\n' <<<"$pk" | grep -qv 'install ok installed'; then
    ok "runtime-packages.sh: $(basename "$probe") needs $(tr '\n' ' ' <<<"$pk")"
  else
    fail "runtime-packages.sh on $probe: '${pk:-}'"
  fi
else
  skip "no built binary or no dpkg: runtime-packages.sh not exercised"
fi
if command -v docker >/dev/null 2>&1 && [[ ${PAGODA_TEST_DOCKER:-0} = 1 ]]; then
  if docker build -q -f "$df" -t pagoda:test . >"$TMP/docker.log" 2>&1; then
    ok "docker build"
  else
    fail "docker build: $(tail -5 "$TMP/docker.log")"
  fi
fi # opt-in (PAGODA_TEST_DOCKER=1): needs a Docker daemon and minutes

# ---- scripts ----
if command -v shellcheck >/dev/null 2>&1; then
  if out=$(shellcheck -x -P SCRIPTDIR/../.. deploy/docker/runtime-packages.sh tests/integration/deploy_assets.sh 2>&1); then
    ok "shellcheck: deploy scripts clean"
  else
    fail "shellcheck: ${out:0:500}"
  fi
else
  skip "shellcheck not installed"
fi

# ---- the flags the assets use exist in the binaries ----
# gateway: from the systemd unit, the Dockerfile and k8s; worker: unit + k8s;
# the CURVE flags from the unit comments and docs/OPERATIONS.md.
gw_flags="--config --print-config --curve-secret-key --curve-authorized-keys --gen-curve-keypair"
wk_flags="--gateway --model --threads --max-seqs --max-batch-tokens --kv-blocks --curve-server-key --curve-secret-key --gen-curve-keypair"
for pair in "pagoda-gateway:$gw_flags" "pagoda-worker:$wk_flags"; do
  bin=${pair%%:*}; flags=${pair#*:}
  if [[ ! -x $BUILD/$bin ]]; then
    skip "$BUILD/$bin not built: its flags not checked"
    continue
  fi
  help=$("$BUILD/$bin" --help 2>&1)
  absent=""
  for f in $flags; do grep -q -- "$f" <<<"$help" || absent+=" $f"; done
  if [[ -z $absent ]]; then ok "$bin --help lists every flag the deploy assets use"
  else fail "$bin --help lacks flags used by deploy/:$absent"; fi
done
finish
