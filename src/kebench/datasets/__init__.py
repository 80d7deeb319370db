"""Kedro datasets for kebench's own file formats and data sources."""

from kebench.datasets.atomic import (
    AtomicCSVDataset,
    AtomicJSONDataset,
    AtomicParquetDataset,
    AtomicTextDataset,
)
from kebench.datasets.axiom_table_dataset import AxiomTableDataset
from kebench.datasets.edit_cases_dataset import EditCasesDataset
from kebench.datasets.injection_sets_dataset import InjectionSetsDataset
from kebench.datasets.mlflow_method_metrics_dataset import MlflowMethodMetricsDataset
from kebench.datasets.mlflow_params_dataset import MlflowParamsDataset
from kebench.datasets.openai_client_dataset import OpenAIClientDataset
from kebench.datasets.rdf_datasets import AmieTsvDataset, NTriplesDataset
from kebench.datasets.shard_partitions_dataset import ShardPartitionsDataset
from kebench.datasets.sparql_endpoint_dataset import SparqlEndpointDataset
from kebench.datasets.work_folder_dataset import WorkFolderDataset

__all__ = [
    "AmieTsvDataset",
    "AtomicCSVDataset",
    "AtomicJSONDataset",
    "AtomicParquetDataset",
    "AtomicTextDataset",
    "AxiomTableDataset",
    "EditCasesDataset",
    "InjectionSetsDataset",
    "MlflowMethodMetricsDataset",
    "MlflowParamsDataset",
    "NTriplesDataset",
    "OpenAIClientDataset",
    "ShardPartitionsDataset",
    "SparqlEndpointDataset",
    "WorkFolderDataset",
]
