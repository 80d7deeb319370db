"""evaluation pipeline definition."""

from kedro.pipeline import Node, Pipeline

from kebench.pipelines.evaluation.nodes import (
    build_report,
    compute_metrics,
    describe_run,
    list_failed_edits,
    score_base_probes,
    score_edited_probes,
    select_edits,
    track_metrics,
)


def create_pipeline(**kwargs) -> Pipeline:
    """probes + model + stored deltas -> probe_scores -> metrics, report, MLflow."""
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
                func=score_edited_probes,
                inputs=[
                    "model",
                    "probes",
                    "base_probe_scores",
                    "selected_edits",
                    "edit_deltas_stored",
                    "params:evaluation",
                ],
                outputs="probe_scores",
                name="score_edited_probes",
            ),
            Node(
                func=compute_metrics,
                inputs=["probe_scores", "params:evaluation"],
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
                inputs=["metrics", "probe_scores", "failed_edits"],
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
                inputs=["model", "selected_edits", "edit_hparams"],
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
