"""``python -m jacbench`` and the ``jacbench`` script: jacbench's ``main`` with the garbage
collector off while it starts (``jacbench.run.collector``: why, and when it is on)."""

from jacbench.run.collector import Collector


def command() -> None:
    collector = Collector.off_for_start_up()
    try:
        from jacbench.run.app import main

        main(collector)
    finally:
        collector.end()


if __name__ == "__main__":
    command()
