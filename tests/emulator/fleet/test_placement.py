"""The by-node index the kubelet and Job runner use to revisit what is on a node."""

from remediation_emulator.fleet.placement import ByNode


def test_objects_follow_their_node_and_are_forgotten_when_gone() -> None:
    index = ByNode()
    index.place("ns/a", "gpu-1")
    index.place("ns/b", "gpu-1")
    index.place("ns/c", "gpu-2")
    assert index.on("gpu-1") == {"ns/a", "ns/b"}

    index.place("ns/a", "gpu-2")  # moved
    assert index.on("gpu-1") == {"ns/b"}
    assert index.on("gpu-2") == {"ns/a", "ns/c"}

    index.place("ns/b", None)  # deleted
    assert index.on("gpu-1") == set()
    index.place("ns/b", None)  # deleting twice is harmless
    assert index.on("gpu-3") == set()


def test_what_is_returned_is_a_copy_safe_to_change_while_iterating() -> None:
    index = ByNode()
    index.place("ns/a", "gpu-1")
    for key in index.on("gpu-1"):
        index.place(key, None)
    assert index.on("gpu-1") == set()
