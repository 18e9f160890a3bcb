import { ApiError } from "../api/client";

/** Whether whoami's failure says the token is no good (then it is forgotten): not a
 * request cut short, as by a navigation away while it was asked (that signed people out:
 * a run page opened right after the runs list found no token). */
export function refused(error: unknown): boolean {
  return error instanceof ApiError && (error.status === 401 || error.status === 403);
}
