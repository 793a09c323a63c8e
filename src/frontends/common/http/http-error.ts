// Failures of the HTTP transport itself (body too large, unsupported content coding,
// unknown route): they carry their own status, unlike ServerErrors, which every
// protocol family maps through its own table.

export class HttpError extends Error {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;

  constructor(status: number, message: string, headers: Readonly<Record<string, string>> = {}) {
    super(message);
    this.name = "HttpError";
    this.status = status;
    this.headers = headers;
  }
}
