"""lifelong pipeline definition."""

from kedro.pipeline import Node, Pipeline

from kebench.pipelines import namespaced
from kebench.pipelines.editing.pipeline import create_pipeline as editing_pipeline
from kebench.pipelines.lifelong.nodes import (
    build_lifelong_report,
    plan_lifelong_stream,
    run_lifelong_stream,
    track_lifelong_metrics,
)
from kebench.pipelines.stealthiness.pipeline import (
    create_pipeline as stealthiness_pipeline,
)


def create_pipeline(**kwargs) -> Pipeline:
    """(editing's hparams and stealthiness's general sets, the same nodes) probes ->
    lifelong_stream; the stream, model, hparams and general sets ->
    stored deltas and checkpoints -> outcomes and model measures -> curves, collapse
    table, report, plot, MLflow."""
    shared = editing_pipeline().only_nodes("editing.resolve_edit_hparams")
    shared += stealthiness_pipeline().only_nodes("stealthiness.build_general_sets")
    return shared + namespaced(
        "lifelong",
        [
            Node(
                func=plan_lifelong_stream,
                inputs=[
                    "probes",
                    "entailed_facts",
                    "params:relations",
                    "params:rippleedits_relations",
                    "params:risk_unification",
                    "params:lifelong",
                ],
                outputs="lifelong_stream",
                name="plan_lifelong_stream",
            ),
            Node(
                func=run_lifelong_stream,
                inputs=[
                    "lifelong_stream",
                    "model",
                    "edit_hparams",
                    "general_sets",
                    "lifelong_deltas_stored",
                    "lifelong_checkpoints_stored",
                    "covariance_stats",
                    "params:lifelong",
                    "params:editing",
                ],
                outputs=["lifelong_outcomes", "lifelong_checkpoints"],
                name="run_lifelong_stream",
            ),
            Node(
                func=build_lifelong_report,
                inputs=[
                    "lifelong_outcomes",
                    "lifelong_checkpoints",
                    "params:lifelong",
                ],
                outputs=[
                    "lifelong_curves",
                    "lifelong_collapse",
                    "lifelong_report",
                    "lifelong_plot",
                ],
                name="build_lifelong_report",
            ),
            Node(
                func=track_lifelong_metrics,
                inputs=["lifelong_curves", "lifelong_collapse"],
                outputs="lifelong_tracked_metrics",
                name="track_lifelong_metrics",
            ),
        ],
    )
