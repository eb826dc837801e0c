// Produces records through kafkajs and @kafkajs/confluent-schema-registry, as a Kafka
// team's Node service would: the consumer's schema registry tests read what it writes.
// The plan comes on standard input as JSON:
//   {"brokers": [...], "registry": "http://…",
//    "schemas": [{"subject", "type": "AVRO"|"JSON", "schema": "<text>"}],
//    "records": [{"topic", "partition", "subject"?, "value", "key"?, "key_subject"?, "corrupt"?, "schema_id"?}]}
// A record with a subject is encoded by the registry client under that subject's schema;
// "corrupt" keeps the client's header and replaces the encoded body with bytes no schema
// reads; "schema_id" frames the JSON text of value under an id the registry does not
// know; "key_subject" encodes key under that subject's schema, as a key serializer does.
// It prints {"ids": {subject: id}}.
import { Kafka, logLevel } from 'kafkajs';
import { SchemaRegistry, SchemaType } from '@kafkajs/confluent-schema-registry';

const chunks = [];
for await (const c of process.stdin) chunks.push(c);
const plan = JSON.parse(Buffer.concat(chunks).toString());

const registry = new SchemaRegistry({ host: plan.registry });
const ids = {};
for (const s of plan.schemas ?? []) {
  const { id } = await registry.register({ type: SchemaType[s.type], schema: s.schema }, { subject: s.subject });
  ids[s.subject] = id;
}

const kafka = new Kafka({ brokers: plan.brokers, logLevel: logLevel.ERROR, clientId: 'schema-client-test' });
const producer = kafka.producer({ allowAutoTopicCreation: true });
await producer.connect();
// One send per topic, records in order: a thousand records are one request, not a thousand.
const byTopic = new Map();
for (const r of plan.records ?? []) {
  let value;
  if (r.subject) {
    value = await registry.encode(ids[r.subject], r.value);
    if (r.corrupt) value = Buffer.concat([value.subarray(0, 5), Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff])]);
  } else if (r.schema_id) {
    const header = Buffer.alloc(5);
    header.writeUInt32BE(r.schema_id, 1);
    value = Buffer.concat([header, Buffer.from(JSON.stringify(r.value))]);
  } else {
    value = JSON.stringify(r.value);
  }
  const key = r.key_subject ? await registry.encode(ids[r.key_subject], r.key) : (r.key ?? null);
  if (!byTopic.has(r.topic)) byTopic.set(r.topic, []);
  byTopic.get(r.topic).push({ partition: r.partition ?? 0, key, value });
}
for (const [topic, messages] of byTopic) {
  await producer.send({ topic, messages });
}
await producer.disconnect();
console.log(JSON.stringify({ ids }));
