"""LA-IMR against the capacity rule at about the same cost (docs/experiments.md 7.3):
paired differences on the same seeds between the la_imr runs of the shipped grid and the
capacity_rule runs of the ablation grid (rho_target 0.87).

    gmmv sweep configs/experiments/autoscalers.yaml
    gmmv sweep configs/experiments/autoscalers_matched.yaml
    python examples/autoscalers_matched.py [results/autoscalers results/autoscalers_matched]
"""

import sys

import pandas as pd

from gmm_volunteer.experiments.autoscale_report import join_sweeps, paired_table, summary_table

main, matched = (sys.argv[1:3] if len(sys.argv) >= 3 else ("results/autoscalers", "results/autoscalers_matched"))
ds = join_sweeps((main, None), (matched, {"capacity_rule": "capacity_rule_0.87"}))
pd.set_option("display.width", 200)
print(summary_table(ds).T.round(2).to_string())
table = paired_table(ds)
print(table.loc[[c for c in table.index.get_level_values(0).unique() if c.startswith("la_imr")]].round(2).to_string())
