"""The gateway's PostgreSQL backend (`ENGINE: gateway.postgresql`): Django's own, whose psycopg pool lends
only connections the server has not closed (docs/operating.md, "Database failover")."""
