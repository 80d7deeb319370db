"""Knowledge-graph access and construction, independent of Kedro."""
