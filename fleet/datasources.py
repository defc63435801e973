"""What a PostgreSQL data source's role may do: a verifier connects only as a read-only role."""

from typing import Any, Final

# Predefined roles that reach outside the data a check reads: the server's files and programs,
# other sessions (their SQL, signals), the server's settings.
DANGEROUS_ROLES: Final = (
    "pg_read_server_files",
    "pg_write_server_files",
    "pg_execute_server_program",
    "pg_signal_backend",
    "pg_signal_autovacuum_worker",
    "pg_read_all_settings",
    "pg_read_all_stats",
    "pg_stat_scan_tables",
    "pg_monitor",
    "pg_checkpoint",
    "pg_create_subscription",
    "pg_use_reserved_connections",
)

ROLE_CHECK: Final = """
SELECT r.rolname, r.rolsuper, r.rolcreaterole, r.rolreplication, r.rolbypassrls,
       ARRAY(SELECT p.rolname::text FROM pg_roles p
             WHERE p.rolname = ANY(%(roles)s) AND pg_has_role(current_user, p.oid, 'MEMBER')
             ORDER BY p.rolname)
FROM pg_roles r WHERE r.rolname = current_user
"""

HOW_TO_READ_ONLY: Final = (
    "connect as a read-only role instead, e.g. CREATE ROLE bulkhead_reader LOGIN PASSWORD '...'; "
    "GRANT CONNECT ON DATABASE <db> TO bulkhead_reader; GRANT USAGE ON SCHEMA public TO "
    "bulkhead_reader; GRANT SELECT ON ALL TABLES IN SCHEMA public TO bulkhead_reader"
)


def too_privileged(cursor: Any) -> str | None:
    """Why the connected role may not run checks (what it may do beyond reading), or None."""
    cursor.execute(ROLE_CHECK, {"roles": list(DANGEROUS_ROLES)})
    row = cursor.fetchone()
    if row is None:
        return f"the connected role is not in pg_roles: {HOW_TO_READ_ONLY}"
    role, superuser, createrole, replication, bypassrls, members = row
    found = [
        name
        for name, held in (
            ("superuser", superuser),
            ("CREATEROLE", createrole),
            ("REPLICATION", replication),
            ("BYPASSRLS", bypassrls),
        )
        if held
    ]
    found += [f"member of {name}" for name in members]
    return f"role {role!r} is {', '.join(found)}: {HOW_TO_READ_ONLY}" if found else None
