"""Functions shipped to site endpoints: probes (read the scheduler) and workloads."""
