/** A request as messages name it: by its id, or, without one, as "a request" (never `request ''`). */
export function requestNamed(id: string): string {
  return id === "" ? "a request" : `request '${id}'`;
}
