"""Faults injected into a running Serve app by the soak and the fault-matrix tests: a Serve
actor, found by a fragment of its Ray name (``#SeerScheduler#``, ``#engine-1#``), SIGKILLed.

Invariant: a kill here lets Serve restart the actor (``no_restart=False``), as a crash would;
it touches only actors in the ``serve`` namespace of the Ray this process is connected to.
"""

from __future__ import annotations


def serve_actors(fragment: str) -> list[str]:
    """The names of the live Serve actors whose name holds ``fragment``."""
    import ray

    return [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == "serve" and fragment in a["name"]
    ]


def kill_serve_actor(name: str) -> None:
    """SIGKILL the Serve actor ``name``; Serve starts it again."""
    import ray

    ray.kill(ray.get_actor(name, namespace="serve"), no_restart=False)


def kill_the_serve_actor(fragment: str) -> str:
    """Kill the one Serve actor whose name holds ``fragment`` and return its name; ValueError
    naming the fragment and the matches unless exactly one matches."""
    names = serve_actors(fragment)
    if len(names) != 1:
        raise ValueError(f"fragment {fragment!r}: {len(names)} Serve actors match: {names}")
    kill_serve_actor(names[0])
    return names[0]
