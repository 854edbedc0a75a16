#!/usr/bin/env python3
"""A scripted stand-in for Slurm's ``sacct`` where accounting stores energy, which the local
Slurm cluster cannot (it has no slurmdbd and no AcctGatherEnergyType plugin: its real sacct
answers "Slurm accounting storage is disabled", and the tests check that answer too).

It takes the options the real one does for this use (``-j/--jobs``, ``-n/--noheader``,
``-P/--parsable2``, ``-o/--format``), refuses an unknown field as sacct 22.05 does, and prints
the requested fields of each listed step, ``|``-separated with no trailing ``|`` as
``--parsable2`` does. Records come from $FAKE_SACCT_DB (JSON: {"JOB.STEP": {"ConsumedEnergyRaw":
..., "ElapsedRaw": ..., "NNodes": ...}}); a record with ``"appears_after": N`` is absent from
the first N calls (a step's record is written as it ends); $FAKE_SACCT_DB set to ``disabled``
answers as a cluster without accounting storage. Each call is appended to $FAKE_SACCT_DB.calls.
"""

import json
import os
import sys
from pathlib import Path

FIELDS = {"jobid": "JobID", "consumedenergyraw": "ConsumedEnergyRaw", "consumedenergy": "ConsumedEnergy",
          "elapsedraw": "ElapsedRaw", "nnodes": "NNodes", "state": "State"}


def main(argv: list[str]) -> int:
    db = os.environ.get("FAKE_SACCT_DB", "disabled")
    if db == "disabled":
        print("Slurm accounting storage is disabled", file=sys.stderr)
        return 1
    jobs, fields, header, parsable = [], ["JobID", "State"], True, False
    args = iter(argv)
    for arg in args:
        if arg in ("-j", "--jobs"):
            jobs += next(args).split(",")
        elif arg.startswith("--jobs="):
            jobs += arg.split("=", 1)[1].split(",")
        elif arg in ("-n", "--noheader"):
            header = False
        elif arg in ("-P", "--parsable2"):
            parsable = True
        elif arg in ("-o", "--format") or arg.startswith("--format="):
            spec = arg.split("=", 1)[1] if "=" in arg else next(args)
            fields = []
            for name in spec.split(","):
                if name.lower() not in FIELDS:
                    print(f'sacct: error: Invalid field requested: "{name}"', file=sys.stderr)
                    return 1
                fields.append(FIELDS[name.lower()])
        else:
            print(f"sacct: unrecognized option '{arg}'", file=sys.stderr)
            return 1
    calls_file = Path(db + ".calls")
    calls = len(calls_file.read_text().splitlines()) if calls_file.exists() else 0
    with open(calls_file, "a") as fh:
        fh.write(json.dumps(argv) + "\n")
    records = json.loads(Path(db).read_text())
    if not parsable:
        print("sacct: this stand-in prints --parsable2 only", file=sys.stderr)
        return 1
    if header:
        print("|".join(fields))
    for job in jobs:
        record = records.get(job)
        if record is None or calls < record.get("appears_after", 0):
            continue
        row = {"JobID": job, "State": "COMPLETED", **record}
        print("|".join(str(row.get(f, "")) for f in fields))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
