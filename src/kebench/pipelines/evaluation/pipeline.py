"""evaluation pipeline definition."""

from kedro.pipeline import Node, Pipeline

from kebench.pipelines.evaluation.nodes import (
    build_report,
    collect_probe_scores,
    compute_metrics,
    describe_run,
    find_joint_drops,
    judge_generations,
    list_failed_edits,
    plan_score_shards,
    score_base_probes,
    score_premise_knowledge,
    score_probe_shards,
    select_edits,
    tabulate_generations,
    track_metrics,
)


def create_pipeline(**kwargs) -> Pipeline:
    """probes + model + stored deltas -> probe score shards -> probe_scores -> metrics,
    report, MLflow."""
    return Pipeline(
        [
            Node(
                func=select_edits,
                inputs=["edit_manifest", "params:evaluation"],
                outputs="selected_edits",
                name="select_edits",
            ),
            Node(
                func=score_base_probes,
                inputs=["model", "probes", "selected_edits", "params:evaluation"],
                outputs="base_probe_scores",
                name="score_base_probes",
            ),
            Node(
                func=score_premise_knowledge,
                inputs=[
                    "model",
                    "premise_probes",
                    "selected_edits",
                    "params:evaluation",
                ],
                outputs="premise_knowledge",
                name="score_premise_knowledge",
            ),
            Node(
                func=find_joint_drops,
                inputs=["selected_edits", "probes", "entailed_facts"],
                outputs="joint_dropped_probes",
                name="find_joint_drops",
            ),
            Node(
                func=plan_score_shards,
                inputs=[
                    "selected_edits",
                    "probes",
                    "joint_dropped_probes",
                    "params:evaluation",
                    "params:compute",
                ],
                outputs="score_shard_plan",
                name="plan_score_shards",
            ),
            Node(
                func=score_probe_shards,
                inputs=[
                    "model",
                    "probes",
                    "base_probe_scores",
                    "score_shard_plan",
                    "joint_dropped_probes",
                    "probe_score_shards_stored",
                    "edit_deltas_stored",
                    "params:evaluation",
                    "params:compute",
                ],
                outputs="probe_score_shards",
                name="score_probe_shards",
            ),
            Node(
                func=collect_probe_scores,
                inputs=[
                    "probe_score_shards",
                    "score_shard_plan",
                    "probes",
                    "base_probe_scores",
                    "selected_edits",
                    "joint_dropped_probes",
                ],
                outputs="probe_scores",
                name="collect_probe_scores",
            ),
            Node(
                func=tabulate_generations,
                inputs=["probe_scores", "probes"],
                outputs="generations",
                name="tabulate_generations",
            ),
            Node(
                func=judge_generations,
                inputs=["generations", "probes", "judge_llm", "params:evaluation"],
                outputs="judgements",
                name="judge_generations",
            ),
            Node(
                func=compute_metrics,
                inputs=[
                    "probe_scores",
                    "probes",
                    "failed_edits",
                    "joint_dropped_probes",
                    "premise_knowledge",
                    "judgements",
                    "params:evaluation",
                ],
                outputs="metrics",
                name="compute_metrics",
            ),
            Node(
                func=list_failed_edits,
                inputs="selected_edits",
                outputs="failed_edits",
                name="list_failed_edits",
            ),
            Node(
                func=build_report,
                inputs=[
                    "metrics",
                    "probe_scores",
                    "failed_edits",
                    "joint_dropped_probes",
                    "entailed_facts",
                    "params:evaluation",
                ],
                outputs=[
                    "evaluation_report",
                    "headline_table",
                    "direct_vs_entailed_plot",
                    "consistency_distribution_plot",
                ],
                name="build_report",
            ),
            Node(
                func=describe_run,
                inputs=[
                    "model",
                    "entailed_facts",
                    "selected_edits",
                    "edit_hparams",
                    "hparams_provenance",
                ],
                outputs="run_params",
                name="describe_run",
            ),
            Node(
                func=track_metrics,
                inputs=["metrics", "failed_edits"],
                outputs="tracked_metrics",
                name="track_metrics",
            ),
        ]
    )
