/** The console's entry: styles, then the app mounted into `#app`. */
import "./styles.css";
import { render } from "preact";
import { App } from "./app.tsx";

render(<App />, document.getElementById("app")!);
