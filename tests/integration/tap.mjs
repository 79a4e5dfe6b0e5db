// tap.mjs — the "ok - …" / "not ok - …" lines the integration scripts count
// (tests/lib.sh run_node_tap), for the node drivers.
//   ok(cond, what)  prints one line, returns cond
//   exitCode()      1 when any ok() failed, else 0: process.exit(exitCode())
let failed = 0;

export function ok(cond, what) {
  console.log(`${cond ? "ok" : "not ok"} - ${what}`);
  if (!cond) failed++;
  return cond;
}

export function exitCode() {
  return failed ? 1 : 0;
}
