"""The agent's Prometheus metrics: the textfile for node_exporter and the optional port."""
