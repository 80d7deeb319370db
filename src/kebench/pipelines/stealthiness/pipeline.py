"""stealthiness pipeline definition."""

from kedro.pipeline import Node, Pipeline

from kebench.pipelines import namespaced
from kebench.pipelines.stealthiness.nodes import (
    build_general_sets,
    build_stealth_report,
    collect_drift,
    measure_base_capability,
    measure_drift_shards,
    plan_drift_shards,
    score_stealth,
    select_stealth_edits,
    track_stealth_metrics,
)


def create_pipeline(**kwargs) -> Pipeline:
    """stored deltas + general sets + probe_scores -> stealth_scores, table, MLflow."""
    return namespaced(
        "stealthiness",
        [
            Node(
                func=select_stealth_edits,
                inputs=[
                    "edit_manifest",
                    "probe_scores",
                    "probes",
                    "params:stealthiness",
                ],
                outputs="stealth_edits",
                name="select_stealth_edits",
            ),
            Node(
                func=build_general_sets,
                inputs=[
                    "general_probes",
                    "neutral_texts",
                    "unrelated_prompts",
                    "general_benchmarks",
                    "params:stealthiness",
                ],
                outputs="general_sets",
                name="build_general_sets",
            ),
            Node(
                func=measure_base_capability,
                inputs=[
                    "model",
                    "general_sets",
                    "base_capability_store_stored",
                    "params:stealthiness",
                ],
                outputs=["base_capability", "base_capability_store"],
                name="measure_base_capability",
            ),
            Node(
                func=plan_drift_shards,
                inputs=[
                    "stealth_edits",
                    "general_sets",
                    "params:stealthiness",
                    "params:compute",
                ],
                outputs="drift_shard_plan",
                name="plan_drift_shards",
            ),
            Node(
                func=measure_drift_shards,
                inputs=[
                    "model",
                    "general_sets",
                    "base_capability",
                    "drift_shard_plan",
                    "drift_shards_stored",
                    "edit_deltas_stored",
                    "params:stealthiness",
                    "params:compute",
                ],
                outputs="drift_shards",
                name="measure_drift_shards",
            ),
            Node(
                func=collect_drift,
                inputs=["drift_shards", "drift_shard_plan"],
                outputs="edit_drift",
                name="collect_drift",
            ),
            Node(
                func=score_stealth,
                inputs=[
                    "edit_drift",
                    "stealth_edits",
                    "probe_scores",
                    "probes",
                    "params:stealthiness",
                ],
                outputs="stealth_scores",
                name="score_stealth",
            ),
            Node(
                func=build_stealth_report,
                inputs=[
                    "stealth_scores",
                    "stealth_edits",
                    "probes",
                    "params:stealthiness",
                ],
                outputs=[
                    "stealth_table",
                    "stealth_auroc",
                    "stealth_report",
                    "success_vs_drift_plot",
                ],
                name="build_stealth_report",
            ),
            Node(
                func=track_stealth_metrics,
                inputs=["stealth_table", "stealth_auroc"],
                outputs="stealth_tracked_metrics",
                name="track_stealth_metrics",
            ),
        ],
    )
