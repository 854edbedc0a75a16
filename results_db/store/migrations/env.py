"""Alembic environment: migrations run on the connection results_db hands over."""

from alembic import context

from results_db.store.schema import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        from sqlalchemy import create_engine

        connection = create_engine(config.get_main_option("sqlalchemy.url")).connect()
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True,
                      compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


run_migrations_online()
