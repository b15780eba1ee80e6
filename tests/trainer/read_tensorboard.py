#!/usr/bin/python3
"""An independent reader of TensorBoard event files, for the tests.

Usage: read_tensorboard.py PROTO_DIR EVENT_FILE...

Generates Python code for trainer/tensorboard.proto with protoc (PROTO_DIR holds the repository
root, where trainer/tensorboard.proto lives), then for each file checks every record's framing:
the 8-byte little-endian length, the masked CRC32C of those 8 bytes, the data and its masked
CRC32C (crc32c from Debian's python3-crc32c, not hdp's code), decodes each Event and prints one
JSON object per scalar: {"file", "step", "tag", "value", "wall_time"}, then one summary object
{"records", "torn_tail", "file_version"} per file. A torn last record (a crash mid-write) is
reported, not an error; a bad CRC anywhere else is, exit 1.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import crc32c


def masked(data):
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def main():
    proto_dir, files = sys.argv[1], sys.argv[2:]
    out_dir = tempfile.mkdtemp(prefix="tb-proto-")
    subprocess.run(["protoc", "-I", proto_dir, "--python_out", out_dir, "trainer/tensorboard.proto"], check=True)
    sys.path.insert(0, out_dir)
    from trainer import tensorboard_pb2  # noqa: E402

    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        pos, records, torn, version = 0, 0, False, None
        while pos < len(data):
            if len(data) - pos < 12:
                torn = True
                break
            header = data[pos:pos + 8]
            (length,) = struct.unpack("<Q", header)
            (header_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
            if header_crc != masked(header):
                sys.exit(f"{path}: record {records}: bad length CRC")
            if len(data) - pos < 12 + length + 4:
                torn = True
                break
            body = data[pos + 12:pos + 12 + length]
            (body_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
            if body_crc != masked(body):
                sys.exit(f"{path}: record {records}: bad data CRC")
            event = tensorboard_pb2.Event()
            event.ParseFromString(body)
            if records == 0:
                version = event.file_version
            for value in event.summary.value:
                print(json.dumps({"file": os.path.basename(path), "step": event.step, "tag": value.tag,
                                  "value": value.simple_value, "wall_time": event.wall_time}))
            records += 1
            pos += 16 + length
        print(json.dumps({"file": os.path.basename(path), "records": records, "torn_tail": torn,
                          "file_version": version}))


if __name__ == "__main__":
    main()
