"""The task lifecycle: the coordinator facade, groups, handles, events, the store,
hooks and milestones, retries, hedging, recovery and transfers in flight."""
