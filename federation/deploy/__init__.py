"""Putting a federation together: ``federation.yaml`` into sites and a coordinator
(:mod:`.config`), the embedded local federation (:mod:`.local`), and ``connect``."""
