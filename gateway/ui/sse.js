// sse.js — Server-Sent Events read from a fetch() response body.
// EventSource cannot POST a body or send an Authorization header, so the
// chat streams through fetch and this reader. Yields each event's data
// (its "data:" lines joined by "\n"); comments and other fields are skipped.

export async function* sseData(response) {
  const reader = response.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      // CRLF / CR line ends become LF; a CR at the very end may be half of a CRLF
      const held = buf.endsWith("\r") ? "\r" : "";
      buf = (held ? buf.slice(0, -1) : buf).replace(/\r\n?/g, "\n");
      let end;
      while ((end = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, end);
        buf = buf.slice(end + 2);
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("data:")) data.push(line.slice(line[5] === " " ? 6 : 5));
        }
        if (data.length) yield data.join("\n");
      }
      buf += held;
    }
  } finally {
    reader.releaseLock();
  }
}
