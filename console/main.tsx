/** The console's entry: styles, then the app mounted into `#app`, and focus kept from dropping to the body. */
import "./styles.css";
import { render } from "preact";
import { App } from "./app.tsx";
import { watchFocusLoss } from "./focus.ts";

watchFocusLoss();
render(<App />, document.getElementById("app")!);
