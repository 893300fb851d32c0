#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# alerts.sh — conf/cbd-alerts.yml is valid (promtool check rules), every
# rule in it has a unit test in tests/cbd-alerts.test.yml and they pass
# (promtool test rules: series in, alerts out), the rules query only
# series cbd exports, and the Grafana dashboard's "cbd up" shows 0, not
# "No data", once cbd is gone. Run by make check; skips without promtool.
set -u
src=${CBD_SRCDIR:?}
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok: $1"; }
fail() { failed=$((failed + 1)); echo "FAILED: $1"; }

command -v promtool >/dev/null 2>&1 || { echo "promtool not installed: skipping"; exit 77; }
tmp=$(mktemp -d /tmp/cbd-alerts.XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM

rules="$src/conf/cbd-alerts.yml"
tests="$src/tests/cbd-alerts.test.yml"
if promtool check rules "$rules" >"$tmp/out" 2>&1; then pass "promtool check rules"; else
	fail "promtool check rules: $(cat "$tmp/out")"; fi
if promtool test rules "$tests" >"$tmp/out" 2>&1; then pass "promtool test rules"; else
	fail "promtool test rules: $(cat "$tmp/out")"; fi

# Every rule is tested: it fires in some test (a named alert expected).
names=$(sed -n 's/^ *- alert: *\([A-Za-z]*\).*/\1/p' "$rules")
[ "$(echo "$names" | wc -w)" -ge 7 ] && pass "7 rules or more" || fail "rules: $names"
for name in $names; do
	if awk -v n="$name" '
		$0 ~ "alertname: " n "$" { inside = 1; next }
		/alertname:/ { inside = 0 }
		inside && /exp_labels:/ { found = 1 }
		END { exit !found }' "$tests"; then
		pass "$name fires in a test"
	else
		fail "$name has no test expecting it to fire"
	fi
done

# The rules query series cbd exports (or Prometheus's own up): every
# cbd_* name is a family cbd's metrics.c writes.
for series in $(grep -o 'cbd_[a-z_]*' "$rules" | sort -u); do
	case "$series" in cbd_alerts) continue ;; esac
	if grep -q "\"$series\"" "$src/src/metrics.c"; then pass "$series is exported"; else
		fail "the rules query $series, which cbd does not export"; fi
done

# So does the Grafana dashboard.
for series in $(grep -o 'cbd_[a-z_]*' "$src/conf/grafana-cbd.json" | sort -u); do
	if grep -q "\"$series\"" "$src/src/metrics.c"; then pass "dashboard: $series is exported"; else
		fail "the dashboard queries $series, which cbd does not export"; fi
done

# The dashboard's "cbd up" panel: 1 while cbd answers, 0 once its scrape
# fails (cbd_up vanishes, up is 0), 0 when nothing is scraped at all.
expr=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print([p for p in d["panels"] if p.get("title") == "cbd up"][0]["targets"][0]["expr"]
      .replace("$instance", ".*"))' "$src/conf/grafana-cbd.json")
if [ -z "$expr" ]; then
	fail "no cbd up panel in the dashboard"
else
	cat >"$tmp/up.test.yml" <<EOF
tests:
  - interval: 1m
    input_series:
      - series: 'up{job="cbd",instance="a:9464"}'
        values: '1 1 0 0 0'
      - series: 'cbd_up{job="cbd",instance="a:9464"}'
        values: '1 1 stale'
    promql_expr_test:
      - expr: '$expr'
        eval_time: 1m
        exp_samples:
          - labels: '{}'
            value: 1
      - expr: '$expr'
        eval_time: 3m
        exp_samples:
          - labels: '{}'
            value: 0
  - interval: 1m
    input_series:
      - series: 'other{job="x"}'
        values: '1 1'
    promql_expr_test:
      - expr: '$expr'
        eval_time: 1m
        exp_samples:
          - labels: '{}'
            value: 0
EOF
	if promtool test rules "$tmp/up.test.yml" >"$tmp/out" 2>&1; then
		pass "the dashboard's cbd up is 0 once cbd is gone"
	else
		fail "the dashboard's cbd up ($expr): $(cat "$tmp/out")"
	fi
fi

echo "alerts: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
