#!/usr/bin/env python3
"""An independent writer of Megatron-LM indexed datasets (PREFIX.idx + PREFIX.bin, "MMIDIDX"
version 1), written from the format's description alone, sharing no code with hdp: the test reads
what it writes with hdp's reader.

usage: write_indexed.py PREFIX DTYPE_CODE < documents.json
documents.json: a JSON list of documents, each a list of sequences, each a list of token ids.
"""
import json
import struct
import sys

FORMATS = {1: "B", 2: "b", 3: "h", 4: "i", 5: "q", 8: "H"}  # the dtype codes of token files


def main():
    prefix, code = sys.argv[1], int(sys.argv[2])
    documents = json.load(sys.stdin)
    item = struct.calcsize("<" + FORMATS[code])
    lengths, pointers, doc_index = [], [], [0]
    offset = 0
    with open(prefix + ".bin", "wb") as bin_file:
        for document in documents:
            for sequence in document:
                bin_file.write(struct.pack("<%d%s" % (len(sequence), FORMATS[code]), *sequence))
                lengths.append(len(sequence))
                pointers.append(offset)
                offset += len(sequence) * item
            doc_index.append(len(lengths))
    with open(prefix + ".idx", "wb") as idx:
        idx.write(b"MMIDIDX\x00\x00")
        idx.write(struct.pack("<Q", 1))
        idx.write(struct.pack("<B", code))
        idx.write(struct.pack("<Q", len(lengths)))
        idx.write(struct.pack("<Q", len(doc_index)))
        idx.write(struct.pack("<%di" % len(lengths), *lengths))
        idx.write(struct.pack("<%dq" % len(pointers), *pointers))
        idx.write(struct.pack("<%dq" % len(doc_index), *doc_index))


if __name__ == "__main__":
    main()
