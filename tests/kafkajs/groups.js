// A KafkaJS idempotent producer and a KafkaJS consumer group against a Kafka listener (tests/e2e/test_kafkajs.py):
//
//     node tests/kafkajs/groups.js BOOTSTRAP TOPIC COUNT
//
// TOPIC has 2 partitions. Two consumers join one group and wait until the group has settled: each holds one of
// the partitions. Then an idempotent producer (InitProducerId without a transactional id, sequence numbers) writes
// COUNT messages, "m-0" ... alternately to partition 0 and 1, in batches of 10. The consumers read until they have
// COUNT between them (and a second more, for a duplicate to show), commit and leave. Prints {"assignments":
// {member: [partitions]} (as they were while reading), "rejoins": how many times a member joined again between the
// group's settling and the members' leaving (a rebalance while reading), "seen": {member: [records]}, "committed":
// {partition: offset}}; exits 1 on any error.
'use strict'

const crypto = require('crypto')
const { Partitioners } = require('kafkajs')
const { client, record, run } = require('./common')

const SETTLE_MS = 30000
const READ_MS = 30000

async function main () {
  const [bootstrap, topic, countArg] = process.argv.slice(2)
  const count = Number(countArg)
  if (!bootstrap || !topic || !(count > 0)) throw new Error('usage: node groups.js BOOTSTRAP TOPIC COUNT')
  const tag = crypto.randomBytes(4).toString('hex')
  const kafka = client(bootstrap, `kafkajs-group-${tag}`)
  const groupId = `kafkajs-group-${tag}`
  const answer = {}

  const members = ['a', 'b']
  const assignments = {}
  let joins = 0
  let joinsSettled = null
  const seen = Object.fromEntries(members.map(name => [name, []]))
  const total = () => members.reduce((sum, name) => sum + seen[name].length, 0)
  let crashed = null
  const consumers = members.map(name => {
    const consumer = kafka.consumer({ groupId, heartbeatInterval: 500, sessionTimeout: 10000, maxWaitTimeInMs: 500 })
    consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
      assignments[name] = (payload.memberAssignment[topic] || []).slice().sort()
      joins += 1
    })
    consumer.on(consumer.events.CRASH, ({ payload }) => {
      crashed = payload.error
    })
    return [name, consumer]
  })
  try {
    for (const [name, consumer] of consumers) {
      await consumer.connect()
      await consumer.subscribe({ topic, fromBeginning: true })
      await consumer.run({
        eachMessage: async ({ partition, message }) => {
          seen[name].push(record(partition, message))
        }
      })
    }
    // settled: each member holds one partition, together both
    const settled = () =>
      members.every(name => (assignments[name] || []).length === 1) &&
      new Set(members.map(name => assignments[name][0])).size === 2
    await waitFor(() => settled(), SETTLE_MS, () => `the group to settle: ${JSON.stringify(assignments)}`, () => crashed)
    joinsSettled = joins

    const producer = kafka.producer({
      idempotent: true,
      maxInFlightRequests: 1,
      createPartitioner: Partitioners.DefaultPartitioner // every message names its partition; and no v2 warning
    })
    await producer.connect()
    try {
      for (let start = 0; start < count; start += 10) {
        const messages = []
        for (let n = start; n < Math.min(start + 10, count); n++) {
          messages.push({ partition: n % 2, key: `m-${n}`, value: `m-${n}` })
        }
        await producer.send({ topic, acks: -1, messages })
      }
    } finally {
      await producer.disconnect()
    }
    await waitFor(() => total() >= count, READ_MS, () => `${count} messages: ${JSON.stringify(seen)}`, () => crashed)
    await new Promise(resolve => setTimeout(resolve, 1000)) // a duplicate would come in now
  } finally {
    // as they were while reading: the first to leave would hand its partition to the other
    answer.assignments = { ...assignments }
    answer.rejoins = joinsSettled === null ? null : joins - joinsSettled
    // each commits what it read, then leaves the group
    await Promise.all(consumers.map(([, consumer]) => consumer.disconnect()))
  }

  const admin = kafka.admin()
  await admin.connect()
  let committed
  try {
    const [answer] = await admin.fetchOffsets({ groupId, topics: [topic] })
    committed = Object.fromEntries(answer.partitions.map(p => [p.partition, Number(p.offset)]))
  } finally {
    await admin.disconnect()
  }
  return { ...answer, seen, committed }
}

async function waitFor (check, timeoutMs, what, crashed) {
  const deadline = Date.now() + timeoutMs
  while (!check()) {
    if (crashed()) throw crashed()
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what()}`)
    await new Promise(resolve => setTimeout(resolve, 100))
  }
}

run(main)
