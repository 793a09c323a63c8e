// An HTTP answer that is no ServerError, and so carries its status (and headers) with it:
// a failure of the HTTP transport itself, the same for every family (body too large,
// unsupported content coding, unknown route), or one of a family's answers that no error
// code gives, with the status its family's table has for it (a WebSocket endpoint's 426,
// SageMaker's 406). ServerErrors get theirs from their family's table, by code.

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
