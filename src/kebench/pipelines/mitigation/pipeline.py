"""mitigation pipeline definition."""

from kedro.pipeline import Node, Pipeline

from kebench.pipelines import namespaced
from kebench.pipelines.editing.nodes import tabulate_edit_deltas
from kebench.pipelines.mitigation.nodes import (
    audit_tampering,
    build_mitigation_report,
    compare_mitigation,
    plan_mitigation,
    propagate_edits,
    score_mitigated_probes,
    select_mitigation_edits,
    summarise_mitigation,
    summarise_tamper_audit,
    track_mitigation_metrics,
)


def create_pipeline(**kwargs) -> Pipeline:
    """stored edits + entailed facts + probes -> mitigated_deltas, mitigation_metrics,
    tamper_audit, report, plots, MLflow."""
    return namespaced(
        "mitigation",
        [
            Node(
                func=select_mitigation_edits,
                inputs=[
                    "edit_manifest",
                    "probe_scores",
                    "probes",
                    "params:mitigation",
                ],
                outputs="mitigation_edits",
                name="select_mitigation_edits",
            ),
            Node(
                func=plan_mitigation,
                inputs=[
                    "mitigation_edits",
                    "entailed_facts",
                    "entailed_questions",
                    "probes",
                    "params:qa_generation.relation_templates",
                    "params:mitigation",
                ],
                outputs=[
                    "propagation_requests",
                    "mitigation_probes",
                    "mitigation_exclusions",
                ],
                name="plan_mitigation",
            ),
            Node(
                func=propagate_edits,
                inputs=[
                    "model",
                    "propagation_requests",
                    "probes",
                    "mitigation_edits",
                    "edit_hparams",
                    "mitigated_deltas_stored",
                    "covariance_stats",
                    "params:editing",
                ],
                outputs="mitigated_deltas",
                name="propagate_edits",
            ),
            Node(
                func=tabulate_edit_deltas,
                inputs="mitigated_deltas",
                outputs="mitigated_manifest",
                name="tabulate_mitigated_deltas",
            ),
            Node(
                func=score_mitigated_probes,
                inputs=[
                    "model",
                    "probes",
                    "base_probe_scores",
                    "mitigation_edits",
                    "mitigated_manifest",
                    "propagation_requests",
                    "mitigated_deltas_stored",
                    "params:mitigation",
                ],
                outputs="mitigated_probe_scores",
                name="score_mitigated_probes",
            ),
            Node(
                func=compare_mitigation,
                inputs=["probe_scores", "mitigated_probe_scores", "mitigation_probes"],
                outputs="mitigation_edit_scores",
                name="compare_mitigation",
            ),
            Node(
                func=summarise_mitigation,
                inputs=[
                    "mitigation_edit_scores",
                    "mitigation_edits",
                    "mitigated_manifest",
                    "mitigation_exclusions",
                    "propagation_requests",
                    "params:mitigation",
                ],
                outputs=[
                    "mitigation_metrics",
                    "mitigation_excluded",
                    "gap_closure_plot",
                ],
                name="summarise_mitigation",
            ),
            Node(
                func=audit_tampering,
                inputs=[
                    "model",
                    "probes",
                    "entailed_facts",
                    "params:qa_generation.relation_templates",
                    "base_probe_scores",
                    "probe_scores",
                    "mitigation_edits",
                    "edit_deltas_stored",
                    "params:mitigation",
                ],
                outputs="tamper_audit",
                name="audit_tampering",
            ),
            Node(
                func=summarise_tamper_audit,
                inputs=["tamper_audit", "params:mitigation"],
                outputs=["tamper_auroc", "tamper_roc_plot"],
                name="summarise_tamper_audit",
            ),
            Node(
                func=build_mitigation_report,
                inputs=[
                    "mitigation_metrics",
                    "tamper_auroc",
                    "mitigation_excluded",
                    "mitigation_probes",
                    "mitigation_edits",
                    "probes",
                ],
                outputs="mitigation_report",
                name="build_mitigation_report",
            ),
            Node(
                func=track_mitigation_metrics,
                inputs=["mitigation_metrics", "tamper_auroc"],
                outputs="mitigation_tracked_metrics",
                name="track_mitigation_metrics",
            ),
        ],
    )
