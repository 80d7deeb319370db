"""The demo's fact tables, CSV files read by ``kebench.demo.build`` (docs/demo_data.md)."""
