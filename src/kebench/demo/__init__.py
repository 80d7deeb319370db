"""The demo dataset: its facts and the builder that writes data/01_raw/demo."""
