"""The strict stand-in of the Globus Compute web service (docs/stand-in.md): the service
behind the real SDK's transport seam, its links to the local endpoint daemons, its memory
of task groups, and the in-process result watcher."""
