// Reads a TensorFlow event file with code kubetrain did not write: the TFRecordsReader of
// @roboflow/tfrecords walks the TFRecord framing and checks both masked CRC-32Cs of every record,
// and google-protobuf's wire reader decodes each record as tensorflow.Event (field numbers of
// TensorFlow's event.proto and summary.proto). The package decodes records as tf.Example, which
// event files do not hold: its decoding step (TFRecordsImageMessage.deserializeBinary, called
// after both CRC checks) is replaced by one that keeps the record's bytes; its framing and CRC
// code run as published. Prints one JSON line per record:
//   {"wall_time":..,"step":..,"file_version":..,"values":[[tag, simple_value], ...]}
// Exits 1 with the package's complaint when it refuses the file.
//
//   node read_event_file.js MODULES_DIR FILE
"use strict";
const fs = require("fs");
const path = require("path");

const [modules, file] = process.argv.slice(2);
const pkg = path.join(modules, "@roboflow/tfrecords/src");
const { TFRecordsReader } = require(path.join(pkg, "tensorFlowReader.js"));
const { TFRecordsImageMessage } = require(path.join(pkg, "tensorFlowRecordsProtoBuf_pb.js"));
const jspb = require(path.join(modules, "google-protobuf"));

TFRecordsImageMessage.deserializeBinary = (data) => ({ data: Uint8Array.from(data) });

const bytes = fs.readFileSync(file);

// The package's reader logs "Wrong Length CRC" / "Wrong Data CRC" and stops at a bad record.
const complaints = [];
const log = console.log;
console.log = (...args) => complaints.push(args.join(" "));
let reader;
try {
  reader = new TFRecordsReader(bytes);
} finally {
  console.log = log;
}
if (complaints.length > 0) {
  console.error(`${file}: @roboflow/tfrecords refused it: ${complaints.join("; ")}`);
  process.exit(1);
}

// The package's reader stops at the first bad record; every byte must have been read.
const records = reader.imageMessages.map((m) => m.data);
const consumed = records.reduce((n, r) => n + 16 + r.length, 0);
if (consumed !== bytes.length) {
  console.error(`${file}: the reader read ${records.length} records, ${consumed} of ${bytes.length} bytes`);
  process.exit(1);
}
if (records.length === 0) {
  console.error(`${file}: no records`);
  process.exit(1);
}

function decodeValue(r) {
  const value = { tag: null, simple_value: null };
  while (r.nextField() && !r.isEndGroup()) {
    if (r.getFieldNumber() === 1) value.tag = r.readString();
    else if (r.getFieldNumber() === 2) value.simple_value = r.readFloat();
    else r.skipField();
  }
  return value;
}

function decodeSummary(r) {
  const values = [];
  while (r.nextField() && !r.isEndGroup()) {
    if (r.getFieldNumber() === 1) {
      const v = {};
      r.readMessage(v, (_, inner) => Object.assign(v, decodeValue(inner)));
      values.push([v.tag, v.simple_value]);
    } else {
      r.skipField();
    }
  }
  return values;
}

for (const record of records) {
  const r = new jspb.BinaryReader(record);
  const event = { wall_time: 0, step: 0, file_version: null, values: null };
  while (r.nextField() && !r.isEndGroup()) {
    switch (r.getFieldNumber()) {
      case 1: event.wall_time = r.readDouble(); break;
      case 2: event.step = r.readInt64(); break;
      case 3: event.file_version = r.readString(); break;
      case 5: {
        const holder = {};
        r.readMessage(holder, (_, inner) => { holder.values = decodeSummary(inner); });
        event.values = holder.values;
        break;
      }
      default: r.skipField();
    }
  }
  console.log(JSON.stringify(event));
}
