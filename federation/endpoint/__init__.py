"""A site's Globus Compute endpoint, run locally: the real engines behind a unix socket.

On a real site this role is played by ``globus-compute-endpoint start`` and the cloud relay.
Locally, one :mod:`daemon` process per site renders the site's template per
``user_endpoint_config`` and, as a multi-user endpoint does, hands the packed tasks the
(offline) web service forwards to it to one user endpoint process (:mod:`user_endpoint`)
per (identity, rendered config), which runs the real engine built from that config.
"""
