import type { InferRequest } from "../core/infer.ts";
import type {
  RequestObserver,
  RequestObserverFactory,
  RequestRecord,
} from "../core/scheduler/request-observer.ts";

export type ObserverFactory = RequestObserverFactory;

/**
 * One observer telling each of `factories`' observers, or undefined when none watches.
 * An observer that throws is contained: watching never fails a request.
 */
export function combineObservers(
  factories: readonly ObserverFactory[],
  onError: (error: unknown) => void,
): ObserverFactory {
  return (model, version) => {
    const observers = factories
      .map((factory) => factory(model, version))
      .filter((o): o is RequestObserver => o !== undefined);
    if (observers.length === 0) return undefined;
    const arriving = observers.filter((o) => o.requestArrived !== undefined);
    return {
      ...(arriving.length === 0
        ? {}
        : {
            requestArrived(request: InferRequest): void {
              for (const observer of arriving) {
                try {
                  observer.requestArrived!(request);
                } catch (error) {
                  onError(error);
                }
              }
            },
          }),
      requestDone(record: RequestRecord): void {
        for (const observer of observers) {
          try {
            observer.requestDone(record);
          } catch (error) {
            onError(error);
          }
        }
      },
      close(): void {
        for (const observer of observers) {
          try {
            observer.close?.();
          } catch (error) {
            onError(error);
          }
        }
      },
    };
  };
}
