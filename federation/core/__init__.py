"""The bottom layer: models and values every other layer shares (envelopes, tasks,
snapshots, site descriptions, errors, paths). Imports nothing else of federation."""
