"""Produces Protobuf records through Confluent's Python client (Debian's
python3-confluent-kafka), as a Kafka team's Python service would: the serializer
registers order.proto and its reference common.proto itself. The consumer's schema
registry tests read what it writes.

The plan comes on standard input as JSON:
  {"brokers": "host:port", "registry": "http://...", "generated": "<dir of order_pb2.py>",
   "records": [{"topic", "partition", "value": {...}, "corrupt"?}]}
"corrupt" keeps the serializer's header and replaces the message with bytes no schema
reads. It prints {"ids": {"<topic>-value": id}}.
"""
import json
import struct
import sys

plan = json.load(sys.stdin)
sys.path.insert(0, plan["generated"])

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402
from google.protobuf import json_format  # noqa: E402

import order_pb2  # noqa: E402

registry = SchemaRegistryClient({"url": plan["registry"]})
serialize = ProtobufSerializer(order_pb2.OrderEvent, registry, {"auto.register.schemas": True})
producer = Producer({"bootstrap.servers": plan["brokers"], "linger.ms": 0})
ids = {}
errors = []
for r in plan["records"]:
    msg = json_format.ParseDict(r["value"], order_pb2.OrderEvent())
    value = serialize(msg, SerializationContext(r["topic"], MessageField.VALUE))
    ids[r["topic"] + "-value"] = struct.unpack(">I", value[1:5])[0]
    if r.get("corrupt"):
        value = value[:6] + b"\xff\xff\xff\xff\xff\xff\xff"
    producer.produce(r["topic"], value=value, partition=r.get("partition", 0),
                     on_delivery=lambda err, _msg: err and errors.append(str(err)))
    producer.flush(30)
if errors:
    sys.exit("delivery failed: " + "; ".join(errors))
print(json.dumps({"ids": ids}))
