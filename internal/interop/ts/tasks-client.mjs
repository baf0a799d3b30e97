// Drives `mcprel serve --stdio` with the official TypeScript SDK's
// experimental task client (@modelcontextprotocol/sdk 1.32.2, the
// 2025-11-25 tasks API) and prints a JSON summary of what it saw.
// tasks_test.go runs it and judges the summary.
//
// usage: node tasks-client.mjs <mcprel-binary> <db-file>
import { resolve } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';

const [binary, db] = process.argv.slice(2);
if (!binary || !db) {
    console.error('usage: node tasks-client.mjs <mcprel-binary> <db-file>');
    process.exit(2);
}
const summary = { errors: [] };
const transport = new StdioClientTransport({
    command: resolve(binary),
    args: ['serve', '--stdio', '--db', resolve(db), '--log-level', 'warn'],
});
const client = new Client({ name: 'mcprel-tasks-interop', version: '0.0.0' }, { capabilities: {} });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
try {
    await client.connect(transport);
    summary.serverTasks = client.getServerCapabilities()?.tasks ?? null;
    const { tools } = await client.listTools();
    summary.reportExecution = tools.find((t) => t.name === 'generate_report')?.execution ?? null;

    // A report as a task, through the SDK's stream: created, polled,
    // then its result from tasks/result.
    const kinds = [];
    let created, result;
    for await (const m of client.experimental.tasks.callToolStream(
        { name: 'generate_report', arguments: { rows: 5, stepMs: 20 } }, CallToolResultSchema, { task: { ttl: 60000 } })) {
        kinds.push(m.type);
        if (m.type === 'taskCreated') created = m.task;
        if (m.type === 'result') result = m.result;
        if (m.type === 'error') summary.errors.push(`stream: ${m.error?.message}`);
    }
    summary.stream = { kinds, created, result };
    if (created) {
        summary.get = await client.experimental.tasks.getTask(created.taskId);
        summary.taskResult = await client.experimental.tasks.getTaskResult(created.taskId, CallToolResultSchema);
        summary.list = await client.experimental.tasks.listTasks();
        try {
            await client.experimental.tasks.cancelTask(created.taskId);
            summary.cancelFinished = 'accepted';
        } catch (e) {
            summary.cancelFinished = { code: e.code, message: e.message };
        }
    }

    // A long report, cancelled: the intent is acknowledged, and the task
    // ends cancelled once its worker reaches a row.
    const long = await client.request(
        { method: 'tools/call', params: { name: 'generate_report', arguments: { rows: 100000, stepMs: 20 }, task: { ttl: 60000 } } },
        (await import('@modelcontextprotocol/sdk/types.js')).CreateTaskResultSchema);
    summary.longCreated = long.task;
    summary.cancel = await client.experimental.tasks.cancelTask(long.task.taskId);
    let after;
    for (let i = 0; i < 200; i++) {
        after = await client.experimental.tasks.getTask(long.task.taskId);
        if (after.status !== 'working') break;
        await sleep(50);
    }
    summary.afterCancel = after;

    // A task asking for a 1 ms TTL: readable right after its create
    // answer, with the TTL the server gave it (at least its minimum).
    const tiny = await client.request(
        { method: 'tools/call', params: { name: 'generate_report', arguments: { rows: 5, stepMs: 20 }, task: { ttl: 1 } } },
        (await import('@modelcontextprotocol/sdk/types.js')).CreateTaskResultSchema);
    summary.tinyCreated = tiny.task;
    summary.tinyGet = await client.experimental.tasks.getTask(tiny.task.taskId);
} catch (e) {
    summary.errors.push(`${e.name}: ${e.message}`);
} finally {
    await client.close().catch(() => {});
}
console.log(JSON.stringify(summary));
