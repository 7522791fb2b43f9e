"""Reads a Perfetto trace with Perfetto's published protos (PyPI `perfetto`, parsed by PyPI
`protobuf`, offline) and prints what it holds as JSON, as a trace processor would see it: each
track event's time resolved through its sequence's clocks (incremental clocks included), its
name and arguments through the sequence's interned data, and every track's slices rebuilt by
replaying its begins and ends in time order.

    python3 perfetto_check.py TRACE

Printed: packets, tracks (threads, processes), slices per name, instants per name, the summed
nanoseconds of the slices per name, the slices' argument names per slice name, the deepest
nesting, and `errors` (an end with no open slice, a slice left open, an unknown interned id, a
track event on an undescribed track, a timestamp on a clock with no snapshot).
"""

import json
import sys
from collections import Counter, defaultdict

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

BOOTTIME = 6
BEGIN, END, INSTANT = (pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END, pb.TrackEvent.TYPE_INSTANT)
CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED


class Sequence:
    def __init__(self):
        self.clear()

    def clear(self):
        self.names, self.categories, self.keys, self.values = {}, {}, {}, {}
        self.default_clock = BOOTTIME
        # clock id -> [trace time of its zero, incremental?, last value]
        self.clocks = {}


def main(path):
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    errors = []
    seqs = defaultdict(Sequence)
    tracks = {}
    events = []  # (ts, index, track, type, name, args)
    for i, p in enumerate(trace.packet):
        seq = seqs[p.trusted_packet_sequence_id]
        if p.sequence_flags & CLEARED:
            seq.clear()
        if p.HasField("trace_packet_defaults") and p.trace_packet_defaults.HasField("timestamp_clock_id"):
            seq.default_clock = p.trace_packet_defaults.timestamp_clock_id
        d = p.interned_data
        for e in d.event_names:
            seq.names[e.iid] = e.name
        for e in d.event_categories:
            seq.categories[e.iid] = e.name
        for e in d.debug_annotation_names:
            seq.keys[e.iid] = e.name
        for e in d.debug_annotation_string_values:
            seq.values[e.iid] = e.str.decode("utf-8", "backslashreplace")
        if p.HasField("clock_snapshot"):
            boot = [c.timestamp for c in p.clock_snapshot.clocks if c.clock_id == BOOTTIME]
            if not boot:
                errors.append(f"packet {i}: a clock snapshot without BOOTTIME")
                continue
            for c in p.clock_snapshot.clocks:
                seq.clocks[c.clock_id] = [boot[0] - c.timestamp, c.is_incremental, c.timestamp]
        if p.HasField("track_descriptor"):
            t = p.track_descriptor
            tracks[t.uuid] = t
        if not p.HasField("track_event"):
            continue
        clock = p.timestamp_clock_id if p.HasField("timestamp_clock_id") else seq.default_clock
        if clock == BOOTTIME:
            ts = p.timestamp
        elif clock in seq.clocks:
            c = seq.clocks[clock]
            value = c[2] + p.timestamp if c[1] else p.timestamp
            c[2] = value
            ts = value + c[0]
        else:
            errors.append(f"packet {i}: clock {clock} has no snapshot on its sequence")
            continue
        e = p.track_event
        if e.track_uuid not in tracks:
            errors.append(f"packet {i}: track {e.track_uuid} not described before its event")
        name = None
        if e.HasField("name_iid"):
            name = seq.names.get(e.name_iid)
            if name is None:
                errors.append(f"packet {i}: event name iid {e.name_iid} not interned")
        elif e.HasField("name"):
            name = e.name
        args = {}
        for a in e.debug_annotations:
            key = seq.keys.get(a.name_iid) if a.HasField("name_iid") else a.name
            if key is None:
                errors.append(f"packet {i}: argument name iid {a.name_iid} not interned")
                continue
            kind = a.WhichOneof("value")
            if kind == "string_value_iid":
                value = seq.values.get(a.string_value_iid)
                if value is None:
                    errors.append(f"packet {i}: string iid {a.string_value_iid} not interned")
            else:
                value = getattr(a, kind)
            args[key] = value
        events.append((ts, i, e.track_uuid, e.type, name, args))

    # A trace processor sorts by time (keeping the file's order among equal times) and
    # replays each track's begins and ends as a stack.
    events.sort(key=lambda e: (e[0], e[1]))
    stacks = defaultdict(list)
    slices, instants, durations, arg_names = Counter(), Counter(), Counter(), defaultdict(set)
    depth = 0
    for ts, i, track, kind, name, args in events:
        stack = stacks[track]
        if kind == BEGIN:
            stack.append((ts, name, dict(args)))
            depth = max(depth, len(stack))
        elif kind == END:
            if not stack:
                errors.append(f"packet {i}: an end on track {track} with no open slice")
                continue
            start, sname, sargs = stack.pop()
            sargs.update(args)
            slices[sname] += 1
            durations[sname] += ts - start
            arg_names[sname].update(sargs)
        elif kind == INSTANT:
            instants[name] += 1
            arg_names[name].update(args)
    for track, stack in stacks.items():
        for start, name, _ in stack:
            errors.append(f"slice {name} on track {track} from {start} never ends")
    print(json.dumps({
        "packets": len(trace.packet),
        "threads": sum(1 for t in tracks.values() if t.HasField("thread")),
        "processes": sum(1 for t in tracks.values() if t.HasField("process")),
        "tracks": len(tracks),
        "slices": slices,
        "instants": instants,
        "slice_ns": durations,
        "args": {k: sorted(v) for k, v in arg_names.items()},
        "max_depth": depth,
        "errors": errors[:20],
        "error_count": len(errors),
    }, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
