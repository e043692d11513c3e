#!/usr/bin/env python3
"""The Grafana dashboard (packaging/systemd/fleetps-grafana-dashboard.json) is valid JSON,
every panel has a query, and every fleetps_* series it queries is one that fleetps exports
(a name registered in server/app/server_metrics.cc, or by the trainers in
trainer/runtime/trainer.cc, heter_trainer/service/heter_service.cc and
heter_trainer/gpups/gpups_sync.cc), and every process_* series one that every fleetps
/metrics serves (common/metrics/process_metrics.cc), so a renamed metric
breaks this test instead of a dashboard panel.
    check_dashboard.py SOURCE_DIR"""
import json
import re
import sys

src = sys.argv[1]
dash = json.load(open(f"{src}/packaging/systemd/fleetps-grafana-dashboard.json"))
exported = set()
for source in ("server/app/server_metrics.cc", "trainer/runtime/trainer.cc", "heter_trainer/service/heter_service.cc",
               "heter_trainer/gpups/gpups_sync.cc"):
    exported |= set(re.findall(r'"(fleetps_[a-z_]+)"', open(f"{src}/{source}").read()))
exported |= set(re.findall(r'"(process_[a-z_]+)"', open(f"{src}/common/metrics/process_metrics.cc").read()))
errors = []
if not dash.get("panels"):
    errors.append("no panels")
used = set()
for panel in dash.get("panels", []):
    targets = panel.get("targets") or []
    if not targets:
        errors.append(f"panel '{panel.get('title')}' has no query")
    for t in targets:
        for name in re.findall(r"\b(?:fleetps|process)_[a-z_]+", t.get("expr", "")):
            base = re.sub(r"_(bucket|count|sum)$", "", name)
            used.add(base)
            if base not in exported:
                errors.append(f"panel '{panel['title']}' queries {name}, which fleetps does not export")
for e in errors:
    print("dashboard:", e, file=sys.stderr)
print(f"dashboard: {len(dash.get('panels', []))} panels, {len(used)} metrics, all exported" if not errors else "")
sys.exit(1 if errors else 0)
